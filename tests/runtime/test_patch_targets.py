# SPDX-License-Identifier: Apache-2.0
"""Every vLLM monkey-patch against the installed vLLM: its target still has
the shape the patch assumes (a vLLM upgrade that renames or reshapes one fails
here), and register() applies the process-wide ones.

Runs in tox env e2e (real vLLM on the CPU); no server.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import afd_plugin
from afd_plugin import patches
from afd_plugin.patches import model_build_names


@pytest.fixture(autouse=True, scope="module")
def environment_fixes() -> None:
    """As in every vLLM process of this environment: the Qwen3.5 model files
    import only with the torchvision fix (the CPU install has no torchvision)."""
    afd_plugin.register_environment_fixes()


@pytest.mark.parametrize("name", patches.ALL_PATCH_MODULES)
def test_patch_target_matches_the_installed_vllm(name: str) -> None:
    importlib.import_module(name).check_target()


def test_a_drifted_target_fails_with_the_vllm_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What check_target says when vLLM renamed a block class."""
    from vllm import __version__
    from vllm.model_executor.models import qwen3_moe

    monkeypatch.delattr(qwen3_moe, "Qwen3MoeMLP")
    missing = "no longer defines class Qwen3MoeMLP"
    with pytest.raises(RuntimeError, match=missing) as info:
        model_build_names.check_target()
    assert f"vLLM {__version__}" in str(info.value)


def test_swapped_names_restores_vllm_and_refuses_unlisted_names() -> None:
    from vllm.model_executor.models import qwen3_moe

    original = qwen3_moe.Qwen3MoeMLP
    stand_in = type("StandIn", (), {})
    with model_build_names.swapped_names(qwen3_moe, Qwen3MoeMLP=stand_in):
        assert qwen3_moe.Qwen3MoeMLP is stand_in
    assert qwen3_moe.Qwen3MoeMLP is original
    with (
        pytest.raises(ValueError, match="not listed"),
        model_build_names.swapped_names(qwen3_moe, Qwen3MoeAttention=stand_in),
    ):
        pass
    assert qwen3_moe.Qwen3MoeAttention is not stand_in


def test_register_applies_every_process_wide_patch() -> None:
    code = (
        "import afd_plugin\n"
        "afd_plugin.register(); afd_plugin.register()\n"
        "from afd_plugin import patches\n"
        "patches.require_patches()\n"
        "from vllm.platforms import current_platform\n"
        "from afd_plugin.patches import config_validation as cv\n"
        "method = getattr(type(current_platform), cv.TARGET)\n"
        "print(patches.applied, patches.failed, getattr(method, cv._MARK, False))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    # register() also applies the environment fixes (torchvision is absent).
    applied = [*patches.ENVIRONMENT_PATCH_MODULES, *patches.PATCH_MODULES]
    assert result.stdout.split("\n")[-2] == f"{applied} {{}} True"


def test_run_fullgraph_wrapper_announces_before_replaying() -> None:
    from afd_plugin.patches.v2_run_fullgraph import announce_before_replay

    events: list[str] = []
    manager = types.SimpleNamespace(
        run_fullgraph=lambda desc: events.append(f"replay {desc}") or "out"
    )
    announce_before_replay(manager, lambda desc: events.append(f"announce {desc}"))
    assert manager.run_fullgraph("d") == "out"
    assert events == ["announce d", "replay d"]
