# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE split by role. Attention: vLLM's own model with each MLP/MoE
block built as a ``RemoteFFN``. FFN: gate, experts and dense MLPs only.
The gate runs on the FFN role only (AFD-I7).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models import qwen3_moe as qm
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


def is_moe_layer(config: Any, index: int) -> bool:
    """vLLM's Qwen3MoeDecoderLayer rule for a sparse MoE block."""
    mlp_only = getattr(config, "mlp_only_layers", None) or []
    return (
        index not in mlp_only
        and config.num_experts > 0
        and (index + 1) % config.decoder_sparse_step == 0
    )


class RemoteQwenMoeBlock(RemoteFFN):
    """Stand-in for the sparse MoE blocks of the Qwen MoE families
    (Qwen3MoeSparseMoeBlock, Qwen3NextSparseMoeBlock; keyword API)."""

    kind = "moe"
    router_logits = 0

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", **_: Any):
        super().__init__(extract_layer_index(prefix))
        experts = vllm_config.model_config.hf_text_config.num_experts
        # Read by vLLM's MoE bookkeeping; the experts live on the FFN role.
        self.n_routed_experts = self.n_logical_experts = experts
        self.n_physical_experts = self.n_local_physical_experts = experts
        self.n_redundant_experts = 0
        self.experts = None


class RemoteQwenMLP(RemoteFFN):
    """Stand-in for the dense MLPs of the Qwen MoE families (Qwen3MoeMLP,
    Qwen2MoeMLP; keyword API)."""

    kind = "dense"
    router_logits = 0

    def __init__(self, *, prefix: str = "", **_: Any) -> None:
        super().__init__(extract_layer_index(prefix))


class Qwen3MoeAttentionModel(AFDRoleModel, qm.Qwen3MoeForCausalLM):
    """Attention role of Qwen3-MoE: embeddings, attention, norms, LM head."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        afd = self.bound_afd_config()
        with swapped_names(
            qm,
            Qwen3MoeSparseMoeBlock=RemoteQwenMoeBlock,
            Qwen3MoeMLP=RemoteQwenMLP,
        ):
            super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.afd = afd
        self.moe_layers = []
        blocks = [layer.mlp for layer in self.model.layers]
        self.afd_spec = exchange_spec(
            vllm_config,
            afd,
            self.config.hidden_size,
            None,
            (LayerExchange(b.layer_index, b.kind, 0) for b in blocks),
        )

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        mine = ((n, w) for n, w in weights if owned_by_role(n, "attention", False))
        return super().load_weights(mine)


class _Qwen3Blocks(FFNBlocks):
    """The attributes vLLM's Qwen3MoeModel.load_weights reads, over blocks."""

    hf_to_vllm_mapper = qm.Qwen3MoeModel.hf_to_vllm_mapper

    def __init__(self, vllm_config: VllmConfig, blocks: list[nn.Module]) -> None:
        super().__init__(vllm_config, blocks)
        self.config = vllm_config.model_config.hf_text_config

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return qm.Qwen3MoeModel.load_weights(self, weights)  # type: ignore[arg-type]


class Qwen3MoeFFNModel(FFNRoleModel):
    """FFN role of Qwen3-MoE: gate, routed experts, dense MLP layers."""

    dense_block = qm.Qwen3MoeMLP
    blocks_class = _Qwen3Blocks

    def is_moe_layer(self, index: int) -> bool:
        return is_moe_layer(self.config, index)

    def build_moe_block(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        return qm.Qwen3MoeSparseMoeBlock(vllm_config=vllm_config, prefix=prefix)

    def run_block(
        self, layer: int, hidden: torch.Tensor, router_logits: torch.Tensor | None
    ) -> torch.Tensor:
        return self.model.layers[layer].mlp(hidden)
