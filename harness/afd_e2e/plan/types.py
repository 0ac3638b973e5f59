# SPDX-License-Identifier: Apache-2.0
"""The plain data the planner passes around: model shape, workload, stage
times, and the error that carries every problem with the inputs at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

DType = Literal["fp8", "bf16", "fp16", "fp32"]
DTYPES: tuple[str, ...] = ("fp8", "bf16", "fp16", "fp32")
DTYPE_BYTES: dict[str, int] = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}

AttentionKind = Literal["mla", "gqa"]


class PlanInputError(ValueError):
    """Bad planner input; ``problems`` lists every one, each naming its file
    (and line where known) and field."""

    def __init__(self, problems: Sequence[str] | str):
        self.problems: tuple[str, ...] = (
            (problems,) if isinstance(problems, str) else tuple(problems)
        )
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs to know about a model, per layer unless named
    otherwise. MFA (Step-3) is GQA with one KV head and a low-rank query."""

    name: str
    source: str
    """Where the shape came from (a config.json path, a built-in's source)."""
    hidden_size: int
    num_layers: int
    moe_layers: int
    """Layers whose FFN is a mixture of experts; the rest are dense."""
    routed_experts: int
    """Routed experts per MoE layer (0 for a dense model)."""
    top_k: int
    """Routed experts each token activates."""
    shared_experts: float
    """Always-active shared FFN width, in units of one routed expert."""
    moe_intermediate_size: int
    """Intermediate width of one routed expert."""
    intermediate_size: int
    """Intermediate width of a dense layer's FFN."""
    attention: AttentionKind
    num_attention_heads: int
    kv_values_per_token: int
    """Values cached per token per layer (MLA: kv_lora_rank + qk_rope_head_dim,
    GQA: 2 x num_key_value_heads x head_dim)."""
    attention_width: int
    """Values each query head reads per cached position (MLA: the 576-wide
    latent, GQA: head_dim); decode attention costs 4 x heads x width FLOPs per
    token of context (scores and values), the convention of Step-3 Table 3."""
    attention_params: int
    """Parameters of one layer's attention projections."""
    vocab_size: int | None = None
    """For the embedding and LM head in the parameter totals (optional)."""

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    @property
    def sparsity(self) -> float:
        """Step-3's S: activated over total experts, shared ones counted in
        both (e.g. (8 + 1)/(256 + 1) for DeepSeek-V3); 1 for a dense model."""
        if self.routed_experts == 0:
            return 1.0
        shared = self.shared_experts
        return (self.top_k + shared) / (self.routed_experts + shared)

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (gate, up and down projections)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_ffn_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def ffn_params_total(self) -> float:
        """FFN parameters of all layers (what the FFN instances hold)."""
        per_moe = (self.routed_experts + self.shared_experts) * self.expert_params
        return self.moe_layers * per_moe + self.dense_layers * self.dense_ffn_params

    @property
    def ffn_params_activated(self) -> float:
        """FFN parameters one token uses across all layers."""
        per_moe = (self.top_k + self.shared_experts) * self.expert_params
        return self.moe_layers * per_moe + self.dense_layers * self.dense_ffn_params

    @property
    def attention_params_total(self) -> int:
        return self.num_layers * self.attention_params

    @property
    def embedding_params(self) -> int:
        """Input embedding plus an untied LM head (0 without vocab_size)."""
        return 2 * self.hidden_size * (self.vocab_size or 0)

    @property
    def total_params(self) -> float:
        return (
            self.ffn_params_total
            + self.attention_params_total
            + (self.embedding_params)
        )

    @property
    def activated_params(self) -> float:
        return (
            self.ffn_params_activated
            + self.attention_params_total
            + self.embedding_params
        )

    def attention_core_flops(self, context: float) -> float:
        """FLOPs of one token's decode attention over ``context`` cached
        tokens, all layers (Step-3 Table 3's "attention FLOPs")."""
        heads, width = self.num_attention_heads, self.attention_width
        return self.num_layers * 4 * heads * width * context

    def attention_linear_flops(self) -> float:
        """FLOPs of one token through the attention projections, all layers."""
        return 2 * self.attention_params_total

    def ffn_flops(self) -> float:
        """FLOPs of one token through the FFNs, all layers."""
        return 2 * self.ffn_params_activated

    def kv_bytes(self, context: float, kv_bytes_per_value: float) -> float:
        """KV-cache bytes of one sequence of ``context`` tokens, all layers."""
        return self.num_layers * self.kv_values_per_token * kv_bytes_per_value * context


@dataclass(frozen=True)
class Workload:
    """What the deployment must serve."""

    context: float
    """Mean KV tokens per sequence during decode (given, or a trace's theta)."""
    tpot_s: float
    """Target time per output token, seconds."""
    source: str
    """How ``context`` was obtained, in words."""


@dataclass(frozen=True)
class StageTimes:
    """One layer's stage times for one micro-batch, seconds: attention on an
    attention instance, the dispatch to the FFN, the FFN, the combine back."""

    attention: float
    dispatch: float
    ffn: float
    combine: float

    @property
    def round_trip(self) -> float:
        """R: one micro-batch's way through a layer with no waiting."""
        return self.attention + self.dispatch + self.ffn + self.combine

    @property
    def exchange(self) -> float:
        """MegaScale-Infer's one-way T_c (the mean of both directions)."""
        return (self.dispatch + self.combine) / 2

    @property
    def compute(self) -> float:
        """MegaScale-Infer's T_f = max{T_a, T_e}."""
        return max(self.attention, self.ffn)

    def slowest(self) -> tuple[str, float]:
        """The stage that occupies its resource longest ('exchange' for either
        direction of the network)."""
        stages = {
            "attention": self.attention,
            "ffn": self.ffn,
            "exchange": max(self.dispatch, self.combine),
        }
        name = max(stages, key=lambda key: stages[key])
        return name, stages[name]

    @property
    def bottleneck(self) -> float:
        """The longest any one resource is busy per micro-batch."""
        return self.slowest()[1]
