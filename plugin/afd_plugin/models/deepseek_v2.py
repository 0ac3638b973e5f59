# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V2/V3 split by role. Attention: vLLM's own model with each
MLP/MoE block built as a ``RemoteFFN`` (plus the gate when it runs here).
FFN: only the blocks, built and loaded with vLLM's DeepSeek code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.fused_moe import GateLinear
from vllm.model_executor.layers.fused_moe.router.router_factory import (
    create_fused_moe_router,
)
from vllm.model_executor.layers.fused_moe.utils import (
    is_model_fused_shared_expert_compatible,
)
from vllm.model_executor.models import deepseek_v2 as ds
from vllm.model_executor.models.utils import extract_layer_index

from afd_plugin.connectors.base import LayerExchange
from afd_plugin.models.ownership import owned_by_role
from afd_plugin.models.remote_ffn import RemoteFFN
from afd_plugin.models.role_model import (
    AFDRoleModel,
    FFNBlocks,
    FFNRoleModel,
    exchange_spec,
)
from afd_plugin.patches.model_build_names import swapped_names


def _router_dtype(config: Any) -> torch.dtype | None:
    return ds._get_moe_router_dtype(config)


def is_moe_layer(config: Any, index: int) -> bool:
    """vLLM's DeepseekV2DecoderLayer rule for an MoE block."""
    return (
        config.n_routed_experts is not None
        and index >= config.first_k_dense_replace
        and index % getattr(config, "moe_layer_freq", 1) == 0
    )


def _make_gate(config: Any, prefix: str) -> nn.Module:
    """The router gate exactly as DeepseekV2MoE builds it."""
    gate = GateLinear(
        config.hidden_size,
        config.n_routed_experts,
        out_dtype=_router_dtype(config),
        prefix=f"{prefix}.gate",
    )
    if getattr(config, "topk_method", None) == "noaux_tc":
        gate.e_score_correction_bias = nn.Parameter(
            torch.empty(config.n_routed_experts, dtype=torch.float32)
        )
    else:
        gate.e_score_correction_bias = None
    return gate


def _make_router(config: Any, gate: nn.Module) -> Any:
    """The router exactly as the colocated DeepseekV2MoE builds it (the routed
    scaling in the top-k weights): a connector that dispatches top-k ids
    routes on the attention side."""
    return create_fused_moe_router(
        top_k=config.num_experts_per_tok,
        global_num_experts=config.n_routed_experts,
        renormalize=config.norm_topk_prob,
        use_grouped_topk=True,
        num_expert_group=getattr(config, "n_group", 1),
        topk_group=getattr(config, "topk_group", 1),
        scoring_func=getattr(config, "scoring_func", "softmax"),
        routed_scaling_factor=getattr(config, "routed_scaling_factor", 1.0),
        e_score_correction_bias=gate.e_score_correction_bias,
    )


def _remote_blocks(gate_on_attention: bool) -> tuple[type, type]:
    """Stand-ins for DeepseekV2MoE and DeepseekV2MLP with their keyword API."""

    class RemoteDeepseekV2MoE(RemoteFFN):
        kind = "moe"

        def __init__(self, *, config: Any, prefix: str = "", **_: Any) -> None:
            gate = _make_gate(config, prefix) if gate_on_attention else None
            router = _make_router(config, gate) if gate is not None else None
            super().__init__(extract_layer_index(prefix), gate, router)
            # Expert counts of the deployment, read by vLLM's MoE bookkeeping;
            # the experts themselves live on the FFN role.
            self.n_routed_experts = config.n_routed_experts
            self.n_shared_experts = config.n_shared_experts
            self.n_logical_experts = self.n_physical_experts = config.n_routed_experts
            self.n_local_physical_experts = config.n_routed_experts
            self.n_redundant_experts = 0
            self.experts = None
            self.router_logits = config.n_routed_experts if gate_on_attention else 0

    class RemoteDeepseekV2MLP(RemoteFFN):
        kind = "dense"
        router_logits = 0

        def __init__(self, *, prefix: str = "", **_: Any) -> None:
            super().__init__(extract_layer_index(prefix))

    return RemoteDeepseekV2MoE, RemoteDeepseekV2MLP


class DeepseekV2AttentionModel(AFDRoleModel, ds.DeepseekV2ForCausalLM):
    """Attention role of DeepSeek-V2/V3: embeddings, MLA, norms, LM head."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        afd = self.bound_afd_config()
        moe, mlp = _remote_blocks(afd.compute_gate_on_attention)
        with swapped_names(ds, DeepseekV2MoE=moe, DeepseekV2MLP=mlp):
            super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.afd = afd
        self.moe_layers = []
        self.moe_mlp_layers = []
        layers = [layer.mlp for layer in self.model.layers]
        self.afd_spec = exchange_spec(
            vllm_config,
            afd,
            self.config.hidden_size,
            _router_dtype(self.config),
            (LayerExchange(b.layer_index, b.kind, b.router_logits) for b in layers),
        )

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        gate = self.afd.compute_gate_on_attention
        mine = ((n, w) for n, w in weights if owned_by_role(n, "attention", gate))
        return super().load_weights(mine)


class _DeepseekBlocks(FFNBlocks):
    """The attributes vLLM's DeepseekV2Model.load_weights reads, over blocks."""

    def __init__(self, vllm_config: VllmConfig, blocks: list[nn.Module]) -> None:
        super().__init__(vllm_config, blocks)
        config = vllm_config.model_config.hf_config
        self.config = config
        self.use_mha = config.model_type == "deepseek" or not (
            getattr(config, "qk_nope_head_dim", 0)
            or getattr(config, "qk_rope_head_dim", 0)
        )
        self.is_fused_shared_expert_enabled = is_model_fused_shared_expert_compatible(
            self.layers, ds.DeepseekV2MoE, "mlp"
        )
        self.num_redundant_experts = (
            vllm_config.parallel_config.eplb_config.num_redundant_experts
        )

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        # vLLM's loader maps stacked and per-expert checkpoint names; it reads
        # only the attributes set above and this module's parameters.
        return ds.DeepseekV2Model.load_weights(self, weights)  # type: ignore[arg-type]


class _GateBias(nn.Module):
    """What stays of the gate on the FFN role when the attention role computes
    the logits: the routing bias the top-k uses (noaux_tc), if any."""

    def __init__(self, bias: nn.Parameter | None) -> None:
        super().__init__()
        self.e_score_correction_bias = bias


class DeepseekV2FFNModel(FFNRoleModel):
    """FFN role of DeepSeek-V2/V3: dense MLPs, gate (unless on attention),
    routed and shared experts."""

    dense_block = ds.DeepseekV2MLP
    blocks_class = _DeepseekBlocks

    def is_moe_layer(self, index: int) -> bool:
        return is_moe_layer(self.config, index)

    def build_moe_block(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        block = ds.DeepseekV2MoE(
            config=self.config,
            parallel_config=vllm_config.parallel_config,
            quant_config=vllm_config.quant_config,
            prefix=prefix,
            apply_routed_scale_to_output=True,
        )
        if self.afd.compute_gate_on_attention:
            block.experts.gate = None
            block.gate = _GateBias(block.gate.e_score_correction_bias)
        return block

    def router_logits(self, index: int) -> int:
        gate = self.afd.compute_gate_on_attention
        return self.config.n_routed_experts if gate and self.is_moe_layer(index) else 0

    def router_dtype(self) -> torch.dtype | None:
        return _router_dtype(self.config)

    def _dense(self, block: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        out = block(hidden)
        if out.dtype == torch.float16:
            # vLLM's decoder layer scales dense outputs against fp16 overflow.
            out *= 1.0 / getattr(self.config, "routed_scaling_factor", 1.0)
        return out

    def run_block(
        self, layer: int, hidden: torch.Tensor, router_logits: torch.Tensor | None
    ) -> torch.Tensor:
        block = self.model.layers[layer].mlp
        if isinstance(block, ds.DeepseekV2MLP):
            return self._dense(block, hidden)
        if router_logits is None:
            return block(hidden)
        out = block.experts(hidden_states=hidden, router_logits=router_logits)
        return out.view(hidden.shape)

    def run_local(self, layer: int, hidden: torch.Tensor) -> torch.Tensor | None:
        block = self.model.layers[layer].mlp
        if isinstance(block, ds.DeepseekV2MLP):
            return self._dense(block, hidden)
        shared = block.shared_experts
        return None if shared is None else shared(hidden)

    def run_routed(
        self, layer: int, rows: torch.Tensor, expert_ids: torch.Tensor
    ) -> torch.Tensor:
        # vLLM's own fused-experts kernel with top-1 routing of weight 1: each
        # row through its one expert, unweighted (the attention side weighs).
        runner = self.model.layers[layer].mlp.experts
        experts = runner.routed_experts
        experts._ensure_moe_quant_config_init()
        ids_dtype = runner._quant_method.topk_indices_dtype or torch.int32
        out = experts.forward_modular(
            x=rows,
            topk_weights=torch.ones(rows.shape[0], 1, dtype=torch.float32),
            topk_ids=expert_ids.view(-1, 1).to(ids_dtype),
        )
        return out.view(rows.shape)
