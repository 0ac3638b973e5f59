# SPDX-License-Identifier: Apache-2.0
"""The model table against the installed vLLM: every architecture this build
splits names role classes that import, the attention one built on vLLM's own
model of that architecture (its class, or the class vLLM derives it from, as
DeepSeek-V3 from V2), the FFN one an FFN role model.

Runs in tox env e2e (real vLLM on the CPU); no server.
"""

from __future__ import annotations

import pytest

from afd_plugin.model_support import BUILT_ARCHITECTURES


@pytest.fixture(scope="module", autouse=True)
def environment_fixes() -> None:
    import afd_plugin

    afd_plugin.register_environment_fixes()


@pytest.mark.parametrize("arch", BUILT_ARCHITECTURES)
def test_role_classes_extend_vllms_model_of_the_architecture(arch: str) -> None:
    from vllm.model_executor.models import ModelRegistry

    from afd_plugin.models import role_model_class
    from afd_plugin.models.role_model import AFDRoleModel, FFNRoleModel

    vllm_class = ModelRegistry._try_load_model_cls(arch)
    assert vllm_class is not None, f"vLLM cannot load {arch}"
    attention = role_model_class(arch, "attention")
    ffn = role_model_class(arch, "ffn")
    vllm_base = next(
        c for c in attention.__mro__ if c.__module__ == vllm_class.__module__
    )
    assert issubclass(vllm_class, vllm_base), (vllm_class, vllm_base)
    assert issubclass(attention, AFDRoleModel)
    assert issubclass(ffn, FFNRoleModel)
