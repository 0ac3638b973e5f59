# SPDX-License-Identifier: Apache-2.0
"""The plugin's environment fixes in a real vLLM process: with torchvision
absent (the CPU install removes its CUDA builds), vLLM's Qwen3.5/3.6 model
file imports once vLLM has loaded the ``afd_env`` plugin, as every server of
this environment does, AFD or colocated; without the plugin it does not.

Runs in tox env e2e (real vLLM on the CPU); no server.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

IMPORT_QWEN3_5 = (
    "from vllm.plugins import load_general_plugins\n"
    "load_general_plugins()\n"
    "from vllm.model_executor.models import qwen3_5\n"
    "from transformers.models.qwen2_vl import image_processing_qwen2_vl as ip\n"
    "print(qwen3_5.Qwen3_5MoeForConditionalGeneration.__name__,"
    " ip.Qwen2VLImageProcessor.__name__)\n"
)


def run(plugins: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VLLM_PLUGINS": plugins}
    env.pop("AFD_PLUGIN_DISABLE", None)
    return subprocess.run(
        [sys.executable, "-c", IMPORT_QWEN3_5],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_torchvision_is_absent_here() -> None:
    """What the fix is for: the CPU environment has no torchvision."""
    assert importlib.util.find_spec("torchvision") is None


@pytest.mark.parametrize("plugins", ["afd_env", "afd"])
def test_qwen3_5_imports_with_the_plugin_loaded(plugins: str) -> None:
    result = run(plugins)
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    # transformers' own fallback class without torchvision
    assert last == "Qwen3_5MoeForConditionalGeneration Qwen2VLImageProcessorPil"


def test_without_the_plugin_qwen3_5_does_not_import() -> None:
    result = run("none_of_ours")
    assert result.returncode != 0
    assert "No module named 'torchvision'" in result.stderr
