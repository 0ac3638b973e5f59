# SPDX-License-Identifier: Apache-2.0
"""Which model architectures AFD can split, on which platforms, with which gate,
and which of them this build holds a role-split model for.

Pure data, the one table of these facts: the validator refuses what it does
not list, the runtime loads the classes it names, the README table is
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
    role_models: RoleModels | None = None
    """What this build can load; None: the family is not in this build yet."""

    def __post_init__(self) -> None:
        if self.role_models is not None:
            stray = set(self.role_models.architectures) - set(self.architectures)
            if stray:
                raise ValueError(f"{self.family}: role models for {sorted(stray)}")

    def in_build(self, architecture: str) -> bool:
        return (
            self.role_models is not None
            and architecture in self.role_models.architectures
        )


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
        notes="Gate on either side where the connector and runner allow it.",
        role_models=RoleModels(
            attention=f"{_MODELS}.deepseek_v2:DeepseekV2AttentionModel",
            ffn=f"{_MODELS}.deepseek_v2:DeepseekV2FFNModel",
            architectures=(
                "DeepseekForCausalLM",
                "DeepseekV2ForCausalLM",
                "DeepseekV3ForCausalLM",
            ),
        ),
    ),
    ModelFamily(
        family="DeepSeek-V4 Flash",
        architectures=("DeepseekV4ForCausalLM",),
        platforms=("npu",),
        gate_on_attention=True,
        notes="Ascend async-CAM path only.",
    ),
    ModelFamily(
        family="Qwen3 MoE",
        architectures=("Qwen3MoeForCausalLM",),
        platforms=("cpu", "cuda"),
        gate_on_attention=False,
        notes="Gate on FFN only.",
        role_models=RoleModels(
            attention=f"{_MODELS}.qwen3_moe:Qwen3MoeAttentionModel",
            ffn=f"{_MODELS}.qwen3_moe:Qwen3MoeFFNModel",
            architectures=("Qwen3MoeForCausalLM",),
        ),
    ),
    ModelFamily(
        family="Qwen3.5 / Qwen3.6 MoE",
        architectures=(
            "Qwen3_5MoeForConditionalGeneration",
            "Qwen3_5MoeForCausalLM",
        ),
        platforms=("cuda",),
        gate_on_attention=False,
        notes="Text-only (`--language-model-only`); gate on FFN only.",
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
    if family is None or not family.in_build(architecture):
        return None
    assert family.role_models is not None
    return family.role_models.target(role)
