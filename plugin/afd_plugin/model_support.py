# SPDX-License-Identifier: Apache-2.0
"""Which model architectures AFD can split, on which platforms, with which gate,
and which of them this build holds a role-split model for.

Pure data, the one table of these facts: the validator refuses what it does
not list, the runtime loads the classes it names, the models page (docs/models.md) is
generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from afd_plugin.connectors.registry import Platform

_MODELS = "afd_plugin.models"


@dataclass(frozen=True)
class RoleModels:
    """The role-split model classes of one family that this build holds."""

    attention: str
    """``module:Class`` of the attention role's model."""
    ffn: str
    """``module:Class`` of the FFN role's model."""
    architectures: tuple[str, ...]
    """The family's architectures these classes split (a subset)."""

    def target(self, role: str) -> str:
        if role not in ("attention", "ffn"):
            raise ValueError(f"role must be 'attention' or 'ffn', got {role!r}")
        return self.attention if role == "attention" else self.ffn


@dataclass(frozen=True)
class ModelFamily:
    """One family of MoE architectures sharing a role-split wrapper."""

    family: str
    architectures: tuple[str, ...]
    platforms: tuple[Platform, ...]
    gate_on_attention: bool
    """Whether ``compute_gate_on_attention=true`` is allowed (AFD-I7)."""
    notes: str = ""
    role_models: tuple[RoleModels, ...] = ()
    """What this build can load, by architecture; empty: the family is not in
    this build yet."""
    checkpoints: tuple[str, ...] = ()
    """Model releases served through these architectures (for the docs)."""
    hybrid: bool = False
    """Linear-attention layers keep a recurrent state per request beside the
    KV cache (vLLM's hybrid cache spec); it stays on the attention role."""

    def __post_init__(self) -> None:
        built = [a for models in self.role_models for a in models.architectures]
        stray = set(built) - set(self.architectures)
        if stray:
            raise ValueError(f"{self.family}: role models for {sorted(stray)}")
        if len(built) != len(set(built)):
            raise ValueError(f"{self.family}: two role models for one architecture")

    def models_for(self, architecture: str) -> RoleModels | None:
        """The role models that split ``architecture``, if this build has them."""
        for models in self.role_models:
            if architecture in models.architectures:
                return models
        return None

    def in_build(self, architecture: str) -> bool:
        return self.models_for(architecture) is not None


MODEL_FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily(
        family="DeepSeek-V2 / V3 / V3.2",
        architectures=(
            "DeepseekForCausalLM",
            "DeepseekV2ForCausalLM",
            "DeepseekV3ForCausalLM",
            "DeepseekV32ForCausalLM",
        ),
        platforms=("cpu", "cuda", "npu"),
        gate_on_attention=True,
        notes=(
            "Gate on either side where the connector and runner allow it. Kimi "
            "K2 / K2-Thinking checkpoints (`model_type: kimi_k2`, sigmoid "
            "scores, `noaux_tc` routing) are `DeepseekV3ForCausalLM` and run "
            "through the same role models."
        ),
        checkpoints=("DeepSeek-V2", "DeepSeek-V3", "Kimi K2"),
        role_models=(
            RoleModels(
                attention=f"{_MODELS}.deepseek_v2:DeepseekV2AttentionModel",
                ffn=f"{_MODELS}.deepseek_v2:DeepseekV2FFNModel",
                architectures=(
                    "DeepseekForCausalLM",
                    "DeepseekV2ForCausalLM",
                    "DeepseekV3ForCausalLM",
                ),
            ),
        ),
    ),
    ModelFamily(
        family="DeepSeek-V4 Flash",
        architectures=("DeepseekV4ForCausalLM",),
        platforms=("npu",),
        gate_on_attention=True,
        notes=(
            "Ascend async-CAM path only, not built. vLLM 0.32.0's CPU "
            "implementation cannot generate (Triton-only kernels in its "
            "attention metadata), so no CPU role-split model is built."
        ),
        checkpoints=("DeepSeek-V4-Flash",),
    ),
    ModelFamily(
        family="Qwen3 MoE",
        architectures=("Qwen3MoeForCausalLM",),
        platforms=("cpu", "cuda"),
        gate_on_attention=False,
        notes="Gate on FFN only.",
        checkpoints=("Qwen3-30B-A3B", "Qwen3-235B-A22B"),
        role_models=(
            RoleModels(
                attention=f"{_MODELS}.qwen3_moe:Qwen3MoeAttentionModel",
                ffn=f"{_MODELS}.qwen3_moe:Qwen3MoeFFNModel",
                architectures=("Qwen3MoeForCausalLM",),
            ),
        ),
    ),
    ModelFamily(
        family="Qwen3.5 / Qwen3.6 MoE",
        architectures=(
            "Qwen3_5MoeForConditionalGeneration",
            "Qwen3_5MoeForCausalLM",
        ),
        platforms=("cpu", "cuda"),
        gate_on_attention=False,
        notes=(
            "Hybrid: Gated DeltaNet and gated full attention, their state on "
            "the attention role. Multimodal checkpoints are served text-only "
            "(`--language-model-only`); gate on FFN only (AFD-I7). vLLM's CPU "
            "kernels need bf16."
        ),
        checkpoints=("Qwen3.5 MoE", "Qwen3.6 MoE"),
        hybrid=True,
        role_models=(
            RoleModels(
                attention=f"{_MODELS}.qwen3_next:Qwen3_5MoeVLAttentionModel",
                ffn=f"{_MODELS}.qwen3_next:Qwen3NextFFNModel",
                architectures=("Qwen3_5MoeForConditionalGeneration",),
            ),
            RoleModels(
                attention=f"{_MODELS}.qwen3_next:Qwen3_5MoeAttentionModel",
                ffn=f"{_MODELS}.qwen3_next:Qwen3NextFFNModel",
                architectures=("Qwen3_5MoeForCausalLM",),
            ),
        ),
    ),
    ModelFamily(
        family="Qwen3-Next",
        architectures=("Qwen3NextForCausalLM",),
        platforms=("cpu", "cuda"),
        gate_on_attention=False,
        notes=(
            "Hybrid like Qwen3.5. Gate on FFN only: its router is Qwen3-MoE's "
            "softmax top-k, and the block's second gate (the shared expert's "
            "sigmoid gate) reads the same hidden state on the FFN role, so "
            "routing on attention would send 8-512 logits per token more and "
            "save the FFN role no work."
        ),
        checkpoints=("Qwen3-Next-80B-A3B",),
        hybrid=True,
        role_models=(
            RoleModels(
                attention=f"{_MODELS}.qwen3_next:Qwen3NextAttentionModel",
                ffn=f"{_MODELS}.qwen3_next:Qwen3NextFFNModel",
                architectures=("Qwen3NextForCausalLM",),
            ),
        ),
    ),
)

_BY_ARCH: dict[str, ModelFamily] = {
    arch: fam for fam in MODEL_FAMILIES for arch in fam.architectures
}
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(_BY_ARCH)
BUILT_ARCHITECTURES: tuple[str, ...] = tuple(
    arch for arch, fam in _BY_ARCH.items() if fam.in_build(arch)
)
"""Architectures this build holds a role-split model for."""


def family_of(architecture: str) -> ModelFamily | None:
    """The family an HF architecture name belongs to, or None if unsupported."""
    return _BY_ARCH.get(architecture)


def role_model_target(architecture: str, role: str) -> str | None:
    """``module:Class`` of ``role``'s model for ``architecture`` in this build."""
    family = _BY_ARCH.get(architecture)
    models = family.models_for(architecture) if family is not None else None
    return models.target(role) if models is not None else None
