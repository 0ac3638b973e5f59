# SPDX-License-Identifier: Apache-2.0
"""The attention role's stand-in for a decoder layer's MLP/MoE block.

The attention role runs vLLM's own decoder layers; only the FFN block becomes
a ``RemoteFFN`` (put in place by ``patches/model_build_names.py``) that
exchanges through the connector in the step's metadata.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from afd_plugin.models.forward_metadata import current_metadata
from afd_plugin.models.micro_batch import yield_turn
from afd_plugin.step_timing import clock

_CLOCK = clock("attention")


class RemoteFFN(nn.Module):
    """Sends the block input (and router logits when the gate lives here) to
    the FFN role and returns what it computed."""

    def __init__(self, layer_index: int, gate: nn.Module | None = None) -> None:
        super().__init__()
        self.layer_index = layer_index
        self.gate = gate

    def forward(self, hidden_states: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
        metadata = current_metadata()
        connector = metadata.connector
        extras: dict[str, torch.Tensor] = {}
        if self.gate is not None:
            router_logits, _ = self.gate(hidden_states)
            extras["router_logits"] = router_logits
        with _CLOCK.part("send"):
            connector.send_attn_output(
                hidden_states, self.layer_index, metadata.stage, **extras
            )
        # Two micro-batches: the other one runs its attention and sends this
        # layer while the FFN side works on ours (runtime/ffn_schedule.py).
        yield_turn()
        with _CLOCK.part("wait"):
            return connector.recv_ffn_output(self.layer_index, metadata.stage)
