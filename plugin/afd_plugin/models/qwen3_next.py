# SPDX-License-Identifier: Apache-2.0
"""Qwen3-Next and Qwen3.5/3.6 MoE split by role: hybrid models whose layers
alternate Gated DeltaNet (linear attention, a recurrent state per request)
and gated full attention, each followed by the same sparse MoE block (router
gate, routed experts, one shared expert scaled by its own sigmoid gate).

Attention: vLLM's own model (text-only or the multimodal class served with
``--language-model-only``) with every MoE/MLP block built as a ``RemoteFFN``;
it owns the KV cache of the full-attention layers and the linear-attention
state of the DeltaNet layers (vLLM's hybrid cache spec). FFN: router gate,
experts, shared expert with its gate, and dense MLPs only; no cache of any
kind. The gate runs on the FFN role only (AFD-I7).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models import qwen3_5 as q35
from vllm.model_executor.models import qwen3_next as qn

from afd_plugin.connectors.base import LayerExchange
from afd_plugin.models import qwen3_moe
from afd_plugin.models.ownership import owned_by_role
from afd_plugin.models.qwen3_moe import RemoteQwenMLP, RemoteQwenMoeBlock
from afd_plugin.models.role_model import (
    AFDRoleModel,
    FFNBlocks,
    FFNRoleModel,
    exchange_spec,
)
from afd_plugin.patches.model_build_names import swapped_names

_QWEN3_5_MOE_TEXT = "qwen3_5_moe_text"


def is_moe_layer(config: Any, index: int) -> bool:
    """vLLM's rule for a sparse MoE block: every layer of Qwen3.5/3.6 MoE
    (``Qwen3_5DecoderLayer``), Qwen3-MoE's sparse-step rule for Qwen3-Next
    (``Qwen3NextDecoderLayer``)."""
    if config.model_type == _QWEN3_5_MOE_TEXT:
        return True
    return qwen3_moe.is_moe_layer(config, index)


@contextmanager
def _remote_blocks() -> Iterator[None]:
    """The block names both model files build with (and test in vLLM's MoE
    bookkeeping) bound to the stand-ins while one model is built."""
    with ExitStack() as stack:
        stack.enter_context(
            swapped_names(
                qn,
                Qwen3NextSparseMoeBlock=RemoteQwenMoeBlock,
                Qwen3NextMLP=RemoteQwenMLP,
            )
        )
        stack.enter_context(
            swapped_names(q35, Qwen3NextSparseMoeBlock=RemoteQwenMoeBlock)
        )
        yield


class _HybridAttentionModel(AFDRoleModel):
    """vLLM's model of one of the three classes (the next base in the MRO),
    built with every MoE/MLP block as a stand-in."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        afd = self.bound_afd_config()
        with _remote_blocks():
            super().__init__(vllm_config=vllm_config, prefix=prefix)  # type: ignore[call-arg]
        self.afd = afd
        self.moe_layers = []
        # The multimodal class keeps its text model as ``language_model``.
        text_model = getattr(self, "language_model", self)
        self.afd_spec = exchange_spec(
            vllm_config,
            self.afd,
            vllm_config.model_config.hf_text_config.hidden_size,
            None,
            (
                LayerExchange(layer.mlp.layer_index, layer.mlp.kind, 0)
                for layer in text_model.model.layers
            ),
        )

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        mine = ((n, w) for n, w in weights if owned_by_role(n, "attention", False))
        return super().load_weights(mine)  # type: ignore[misc]


class Qwen3NextAttentionModel(_HybridAttentionModel, qn.Qwen3NextForCausalLM):
    """Attention role of Qwen3-Next: embeddings, DeltaNet and gated
    attention layers with their state, norms, LM head."""


class Qwen3_5MoeAttentionModel(_HybridAttentionModel, q35.Qwen3_5MoeForCausalLM):
    """Attention role of Qwen3.5/3.6 MoE (text-only checkpoints)."""


class Qwen3_5MoeVLAttentionModel(
    _HybridAttentionModel, q35.Qwen3_5MoeForConditionalGeneration
):
    """Attention role of Qwen3.5/3.6 MoE multimodal checkpoints, served
    text-only (``--language-model-only``): vLLM's class, whose vision tower
    vLLM itself leaves unbuilt then, around the split language model."""


class _HybridBlocks(FFNBlocks):
    """The attributes vLLM's Qwen3NextModel.load_weights reads, over blocks
    (its mapper fuses the dense and shared-expert gate/up projections)."""

    hf_to_vllm_mapper = qn.Qwen3NextModel.hf_to_vllm_mapper

    def __init__(self, vllm_config: VllmConfig, blocks: list[nn.Module]) -> None:
        super().__init__(vllm_config, blocks)
        self.config = vllm_config.model_config.hf_text_config
        self.is_fused_shared_expert_enabled = False

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return qn.Qwen3NextModel.load_weights(self, weights)  # type: ignore[arg-type]


_VL_LANGUAGE_MODEL = "model.language_model."


class Qwen3NextFFNModel(FFNRoleModel):
    """FFN role of Qwen3-Next and Qwen3.5/3.6 MoE: router gate, routed
    experts, shared expert and its gate, dense MLPs. Multimodal checkpoints
    name the language model's blocks ``model.language_model.layers.N``."""

    dense_block = qn.Qwen3NextMLP
    blocks_class = _HybridBlocks

    def is_moe_layer(self, index: int) -> bool:
        return is_moe_layer(self.config, index)

    def build_moe_block(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        return qn.Qwen3NextSparseMoeBlock(vllm_config=vllm_config, prefix=prefix)

    def run_block(
        self, layer: int, hidden: torch.Tensor, router_logits: torch.Tensor | None
    ) -> torch.Tensor:
        return self.model.layers[layer].mlp(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        def text_names() -> Iterator[tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                if name.startswith(_VL_LANGUAGE_MODEL):
                    name = "model." + name.removeprefix(_VL_LANGUAGE_MODEL)
                yield name, tensor

        return super().load_weights(text_names())
