# SPDX-License-Identifier: Apache-2.0
"""The order in which the FFN side serves one step's (layer, stage) exchanges.

Pure. With two micro-batches the attention side yields to the other
micro-batch after every send, so its wire order is: send L0 s0, send L0 s1,
recv L0 s0, send L1 s0, recv L0 s1, send L1 s1, ...

Two FFN orders match it:

- **mirrored** (transports that match operations one to one, without tags or
  buffering, NCCL): the FFN side issues exactly the mirror image, so no send
  waits on a receive the peer posts later. Each stage's block then waits for
  the other stage's next input, so FFN and attention work in turn.
- **pipelined** (buffered transports, whose sends return before the peer
  receives: the shared-memory rings): per layer and stage, receive and run at
  once. The FFN side works on one micro-batch while the attention side runs
  the other's attention: the ping-pong that makes the split pay.

Each direction carries the same sequence in both orders; only when the FFN
side receives differs.
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
    layers: Sequence[int], stages: Sequence[int], pipelined: bool = False
) -> tuple[ExchangeOp, ...]:
    """The FFN side's operations for one step (stages with no data are left
    out by the caller). ``pipelined``: receive each input just before running
    it; else mirror the attention side's wire order (receive every stage's
    first input, then per layer and stage run, and receive that stage's next
    input)."""
    if not layers or not stages:
        return ()
    if pipelined:
        return tuple(
            op
            for layer in layers
            for s in stages
            for op in (ExchangeOp("recv", layer, s), ExchangeOp("run", layer, s))
        )
    ops = [ExchangeOp("recv", layers[0], s) for s in stages]
    for i, layer in enumerate(layers):
        for s in stages:
            ops.append(ExchangeOp("run", layer, s))
            if i + 1 < len(layers):
                ops.append(ExchangeOp("recv", layers[i + 1], s))
    return tuple(ops)
