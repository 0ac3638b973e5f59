# SPDX-License-Identifier: Apache-2.0
"""The order in which the FFN side serves one step's (layer, stage) exchanges,
matching the order the attention side issues them.

Pure. With two micro-batches the attention side yields to the other
micro-batch after every send, so its wire order is: send L0 s0, send L0 s1,
recv L0 s0, send L1 s0, recv L0 s1, send L1 s1, ... The FFN side mirrors it
exactly, so point-to-point transports without tags (NCCL) never deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ExchangeOp:
    """One FFN-side operation: receive a stage's layer input, or run the layer
    on it and send the output back."""

    kind: Literal["recv", "run"]
    layer: int
    stage: int


def exchange_schedule(
    layers: Sequence[int], stages: Sequence[int]
) -> tuple[ExchangeOp, ...]:
    """Receive every stage's first input, then per layer and stage: run and
    send, and receive that stage's next input (stages with no data are left
    out by the caller)."""
    if not layers or not stages:
        return ()
    ops = [ExchangeOp("recv", layers[0], s) for s in stages]
    for i, layer in enumerate(layers):
        for s in stages:
            ops.append(ExchangeOp("run", layer, s))
            if i + 1 < len(layers):
                ops.append(ExchangeOp("recv", layers[i + 1], s))
    return tuple(ops)
