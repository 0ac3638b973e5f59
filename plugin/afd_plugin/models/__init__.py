"""Role-split model wrappers: each role builds and loads only its own modules.

The role runner picks the class here (``role_model_class``) and builds it with
vLLM's ``initialize_model(model_class=...)``; vLLM's ModelRegistry is left
alone, so non-AFD servers in the same environment are unaffected. The wrapper
modules import vLLM and are loaded lazily.
"""

from __future__ import annotations

import importlib

_DEEPSEEK = {
    "attention": "afd_plugin.models.deepseek_v2:DeepseekV2AttentionModel",
    "ffn": "afd_plugin.models.deepseek_v2:DeepseekV2FFNModel",
}
_QWEN3_MOE = {
    "attention": "afd_plugin.models.qwen3_moe:Qwen3MoeAttentionModel",
    "ffn": "afd_plugin.models.qwen3_moe:Qwen3MoeFFNModel",
}

# HF architecture -> role -> "module:Class".
ROLE_MODELS: dict[str, dict[str, str]] = {
    "DeepseekForCausalLM": _DEEPSEEK,
    "DeepseekV2ForCausalLM": _DEEPSEEK,
    "DeepseekV3ForCausalLM": _DEEPSEEK,
    "Qwen3MoeForCausalLM": _QWEN3_MOE,
}


def role_model_class(architecture: str, role: str) -> type:
    """The model class ``role`` builds for ``architecture``."""
    try:
        target = ROLE_MODELS[architecture][role]
    except KeyError:
        raise RuntimeError(
            f"no AFD {role} model for architecture {architecture!r} in this "
            f"runtime; available: {', '.join(ROLE_MODELS)}"
        ) from None
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)
