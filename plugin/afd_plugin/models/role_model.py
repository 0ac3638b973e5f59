"""What both role models share: which checkpoint weights a role owns, the
exchange spec, and the FFN role's base class (blocks only, no attention).

Family modules (deepseek_v2.py, qwen3_moe.py) fill in the blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models.utils import AutoWeightsLoader, maybe_prefix

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import ExchangeSpec, LayerExchange
from afd_plugin.models.ownership import owned_by_role
from afd_plugin.runtime.role import require_afd_config

FFN_REFUSAL = (
    "this is an AFD ffn server: it runs only the FFN blocks for its attention "
    "servers and serves no requests; send requests to the attention server"
)


def exchange_spec(
    vllm_config: VllmConfig,
    hidden_size: int,
    router_dtype: torch.dtype | None,
    layers: Iterable[LayerExchange],
) -> ExchangeSpec:
    dtype = vllm_config.model_config.dtype
    parallel = vllm_config.parallel_config
    return ExchangeSpec(
        hidden_size=hidden_size,
        dtype=str(dtype).removeprefix("torch."),
        router_dtype=str(router_dtype or dtype).removeprefix("torch."),
        layers=tuple(layers),
        # Micro-batch stages per step; both roles must run --enable-dbo alike.
        stages=parallel.num_ubatches if parallel.use_ubatching else 1,
    )


class FFNBlocks(nn.Module):
    """``model.layers[i].mlp`` for every layer; other layer parts are absent."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer(block) for block in blocks)


class _Layer(nn.Module):
    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp


class FFNRoleModel(nn.Module):
    """Base of the FFN role's models: builds the blocks, loads their weights,
    runs one layer's block on request of the FFN daemon."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        self.afd: AFDConfig = require_afd_config(vllm_config)
        self.config = vllm_config.model_config.hf_text_config
        self.model = self.build_blocks(vllm_config, maybe_prefix(prefix, "model"))
        self.afd_spec = self.build_exchange_spec(vllm_config)

    # -- family hooks -------------------------------------------------------

    def build_blocks(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        raise NotImplementedError

    def build_exchange_spec(self, vllm_config: VllmConfig) -> ExchangeSpec:
        raise NotImplementedError

    def run_block(
        self, layer: int, hidden: torch.Tensor, router_logits: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    # -- daemon interface ---------------------------------------------------

    @property
    def afd_layers(self) -> tuple[int, ...]:
        return tuple(x.layer for x in self.afd_spec.layers)

    def run_ffn_layer(
        self, layer: int, hidden: torch.Tensor, router_logits: torch.Tensor | None
    ) -> torch.Tensor:
        if hidden.shape[0] == 0:
            return hidden
        return self.run_block(layer, hidden, router_logits)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        gate = self.afd.compute_gate_on_attention
        mine = ((n, w) for n, w in weights if owned_by_role(n, "ffn", gate))
        return AutoWeightsLoader(self).load_weights(mine)

    # -- vLLM's text-generation interface: present, refused -----------------

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(FFN_REFUSAL)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise RuntimeError(FFN_REFUSAL)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        raise RuntimeError(FFN_REFUSAL)
