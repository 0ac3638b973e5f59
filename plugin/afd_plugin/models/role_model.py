# SPDX-License-Identifier: Apache-2.0
"""What both role models share: the typed AFD config they are built with, the
exchange spec, and the FFN role's base class (blocks only, no attention).

Family modules (deepseek_v2.py, qwen3_moe.py) fill in the blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models.utils import AutoWeightsLoader, maybe_prefix

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import DispatchWork, ExchangeSpec, LayerExchange
from afd_plugin.errors import FFN_REFUSAL
from afd_plugin.models.ownership import owned_by_role


class AFDRoleModel:
    """Mixed into every role model: the AFD config it was bound to. vLLM builds
    a model from ``vllm_config`` and ``prefix`` only, so the loader binds the
    typed config to the class (``bind_afd_config``) instead of re-parsing it."""

    afd_config: ClassVar[AFDConfig | None] = None

    @classmethod
    def bound_afd_config(cls) -> AFDConfig:
        if cls.afd_config is None:
            raise RuntimeError(
                f"{cls.__name__} was built without its AFD config; AFD role models "
                "are built by afd_plugin.runtime.model_loading.load_role_model"
            )
        return cls.afd_config


def bind_afd_config(model_class: type, afd: AFDConfig) -> type:
    """A subclass of ``model_class`` (same name) carrying ``afd``."""
    if not issubclass(model_class, AFDRoleModel):
        raise TypeError(f"{model_class.__name__} is not an AFD role model")
    return type(
        model_class.__name__,
        (model_class,),
        {
            "afd_config": afd,
            "__module__": model_class.__module__,
            "__qualname__": model_class.__qualname__,
        },
    )


def exchange_spec(
    vllm_config: VllmConfig,
    afd: AFDConfig,
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
        # Micro-batch stages per step, agreed at rendezvous: vLLM's DBO
        # (--enable-dbo, CUDA) or the CPU micro-batches (afd.micro_batches).
        stages=parallel.num_ubatches if parallel.use_ubatching else afd.micro_batches,
    )


class FFNBlocks(nn.Module):
    """``model.layers[i].mlp`` for every layer; other layer parts are absent."""

    def __init__(self, vllm_config: VllmConfig, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer(block) for block in blocks)


class _Layer(nn.Module):
    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp


class FFNRoleModel(AFDRoleModel, nn.Module):
    """Base of the FFN role's models: builds the blocks, loads their weights,
    runs one layer's block on request of the FFN daemon."""

    dense_block: ClassVar[type[nn.Module]]
    """vLLM's dense MLP class of the family (built with its keyword API)."""
    blocks_class: ClassVar[type[FFNBlocks]] = FFNBlocks

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        self.afd = self.bound_afd_config()
        self.config = vllm_config.model_config.hf_text_config
        self.model = self.build_blocks(vllm_config, maybe_prefix(prefix, "model"))
        self.afd_spec = exchange_spec(
            vllm_config,
            self.afd,
            self.config.hidden_size,
            self.router_dtype(),
            (
                LayerExchange(
                    i,
                    "moe" if self.is_moe_layer(i) else "dense",
                    self.router_logits(i),
                )
                for i in range(self.config.num_hidden_layers)
            ),
        )

    # -- family hooks -------------------------------------------------------

    def is_moe_layer(self, index: int) -> bool:
        raise NotImplementedError

    def build_moe_block(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        raise NotImplementedError

    def router_logits(self, index: int) -> int:
        """Router logits per token layer ``index`` receives (gate on attention)."""
        return 0

    def router_dtype(self) -> torch.dtype | None:
        return None

    def run_block(
        self, layer: int, hidden: torch.Tensor, router_logits: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    # Connector-driven serving (CAM async): the router ran on attention.

    def run_local(self, layer: int, hidden: torch.Tensor) -> torch.Tensor | None:
        """What the home FFN rank computes on every token: the dense block, or
        the MoE block's shared experts (None when it has none)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not serve dispatches (gate on attention)"
        )

    def run_routed(
        self, layer: int, rows: torch.Tensor, expert_ids: torch.Tensor
    ) -> torch.Tensor:
        """One unweighted output row per routed row: expert ``expert_ids[i]``
        applied to ``rows[i]``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not serve dispatches (gate on attention)"
        )

    # -- building -----------------------------------------------------------

    def build_blocks(self, vllm_config: VllmConfig, prefix: str) -> FFNBlocks:
        config = self.config
        blocks: list[nn.Module] = []
        for i in range(config.num_hidden_layers):
            block_prefix = f"{prefix}.layers.{i}.mlp"
            if self.is_moe_layer(i):
                blocks.append(self.build_moe_block(vllm_config, block_prefix))
            else:
                blocks.append(
                    self.dense_block(
                        hidden_size=config.hidden_size,
                        intermediate_size=config.intermediate_size,
                        hidden_act=config.hidden_act,
                        quant_config=vllm_config.quant_config,
                        prefix=block_prefix,
                    )
                )
        return self.blocks_class(vllm_config, blocks)

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

    def run_dispatch(
        self, work: DispatchWork
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Serve one dispatch: ``(local, routed)`` for ``send_combine``."""
        local = None
        if work.home and work.hidden.shape[0]:
            local = self.run_local(work.layer, work.hidden)
        routed = work.routed
        if routed.shape[0]:
            routed = self.run_routed(work.layer, routed, work.routed_experts)
        return local, routed

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
