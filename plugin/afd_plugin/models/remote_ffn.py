# SPDX-License-Identifier: Apache-2.0
"""The attention role's stand-in for a decoder layer's MLP/MoE block.

The attention role runs vLLM's own decoder layers; only the FFN block becomes
a ``RemoteFFN`` (put in place by ``patches/model_build_names.py``) that
exchanges through the connector in the step's metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from afd_plugin.models.forward_metadata import current_metadata
from afd_plugin.models.micro_batch import yield_turn
from afd_plugin.step_timing import clock

if TYPE_CHECKING:
    from afd_plugin.connectors.base import AFDConnector

_CLOCK = clock("attention")


class RemoteFFN(nn.Module):
    """Sends the block input (and the routing when the gate lives here) to the
    FFN role and returns what it computed."""

    def __init__(
        self, layer_index: int, gate: nn.Module | None = None, router: Any = None
    ) -> None:
        super().__init__()
        self.layer_index = layer_index
        self.gate = gate
        self.router = router
        """vLLM's router of the block, for connectors that dispatch top-k ids."""

    def _routing(
        self, connector: AFDConnector, hidden_states: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        if self.gate is None:
            return {}
        router_logits, _ = self.gate(hidden_states)
        if not connector.dispatches_topk:
            return {"router_logits": router_logits}
        if self.router is None:
            raise RuntimeError(
                f"layer {self.layer_index}: {type(connector).__name__} dispatches "
                "top-k ids but this model family builds no router on attention"
            )
        weights, ids = self.router.select_experts(hidden_states, router_logits)
        return {"topk_weights": weights, "topk_ids": ids}

    def forward(self, hidden_states: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        metadata = current_metadata()
        connector = metadata.connector
        if connector.control_plane is None and metadata.payload.is_profile:
            # AFD-I2: no control plane, so the FFN side runs no profile step;
            # the profile run's FFN output is never read.
            return torch.zeros_like(hidden_states)
        extras = self._routing(connector, hidden_states)
        with _CLOCK.part("send"):
            connector.send_attn_output(
                hidden_states, self.layer_index, metadata.stage, **extras
            )
        # Two micro-batches: the other one runs its attention and sends this
        # layer while the FFN side works on ours (runtime/ffn_schedule.py).
        yield_turn()
        with _CLOCK.part("wait"):
            return connector.recv_ffn_output(self.layer_index, metadata.stage)
