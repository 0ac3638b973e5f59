# SPDX-License-Identifier: Apache-2.0
"""The FFN side serves (layer, stage) exchanges in exactly the order the
attention side issues them with two micro-batches that yield after each send.
"""

from __future__ import annotations

from afd_plugin.runtime.ffn_schedule import ExchangeOp, exchange_schedule


def attention_wire_order(layers: list[int], stages: int) -> list[tuple[str, int, int]]:
    """Simulate vLLM's DBO threads: each micro-batch runs its layers, sends,
    yields to the next micro-batch, then receives (RemoteFFN)."""

    def ubatch(stage: int):
        for layer in layers:
            yield ("send", layer, stage)
            yield "yield"
            yield ("recv", layer, stage)

    threads = [ubatch(s) for s in range(stages)]
    order: list[tuple[str, int, int]] = []
    current, done = 0, set()
    while len(done) < stages:
        for item in threads[current]:
            if item == "yield":
                break
            order.append(item)
        else:
            done.add(current)
        current = (current + 1) % stages
        while len(done) < stages and current in done:
            current = (current + 1) % stages
    return order


def mirrored(ops: tuple[ExchangeOp, ...]) -> list[tuple[str, int, int]]:
    # The FFN's recv matches an attention send; its run ends in a send that
    # matches an attention recv.
    return [("send" if op.kind == "recv" else "recv", op.layer, op.stage) for op in ops]


def test_two_stages_match_the_attention_interleaving() -> None:
    layers = [0, 1, 2]
    ops = exchange_schedule(layers, (0, 1))
    assert mirrored(ops) == attention_wire_order(layers, 2)
    assert mirrored(ops)[:4] == [
        ("send", 0, 0),
        ("send", 0, 1),
        ("recv", 0, 0),
        ("send", 1, 0),
    ]


def test_one_stage_is_recv_run_per_layer() -> None:
    ops = exchange_schedule([0, 1], (0,))
    assert [(o.kind, o.layer) for o in ops] == [
        ("recv", 0),
        ("run", 0),
        ("recv", 1),
        ("run", 1),
    ]
    assert mirrored(ops) == attention_wire_order([0, 1], 1)
    assert exchange_schedule([0, 1], ()) == ()
