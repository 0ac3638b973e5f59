"""Which model architectures AFD can split, on which platforms, with which gate.

Pure data; the README model table is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from afd_plugin.connectors.registry import Platform


@dataclass(frozen=True)
class ModelFamily:
    """One family of MoE architectures sharing a role-split wrapper."""

    family: str
    architectures: tuple[str, ...]
    platforms: tuple[Platform, ...]
    gate_on_attention: bool
    """Whether ``compute_gate_on_attention=true`` is allowed (AFD-I7)."""
    notes: str = ""


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


def family_of(architecture: str) -> ModelFamily | None:
    """The family an HF architecture name belongs to, or None if unsupported."""
    return _BY_ARCH.get(architecture)
