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


def direction_sequences(
    attention: list[tuple[str, int, int]], ffn: tuple[ExchangeOp, ...]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """What each direction carries, per side: attention sends and FFN
    receives must list the same (layer, stage) sequence, and FFN runs (which
    end in a send) the same sequence as attention receives."""
    to_ffn = [(layer, stage) for kind, layer, stage in attention if kind == "send"]
    from_ffn = [(layer, stage) for kind, layer, stage in attention if kind == "recv"]
    ffn_recv = [(o.layer, o.stage) for o in ffn if o.kind == "recv"]
    ffn_send = [(o.layer, o.stage) for o in ffn if o.kind == "run"]
    assert to_ffn == ffn_recv
    assert from_ffn == ffn_send
    return to_ffn, from_ffn


def test_pipelined_serves_each_micro_batch_as_it_arrives() -> None:
    layers = [0, 1, 2]
    ops = exchange_schedule(layers, (0, 1), pipelined=True)
    # Run stage 0's layer before stage 1's input is even received: the FFN
    # side works on one micro-batch while the attention side runs the other.
    assert [(o.kind, o.layer, o.stage) for o in ops[:4]] == [
        ("recv", 0, 0),
        ("run", 0, 0),
        ("recv", 0, 1),
        ("run", 0, 1),
    ]
    # Each direction carries the attention side's sequence, so buffered
    # channels matched by order (the shared-memory rings) need no tags.
    direction_sequences(attention_wire_order(layers, 2), ops)
    direction_sequences(
        attention_wire_order(layers, 2), exchange_schedule(layers, (0, 1))
    )


def test_the_mirrored_order_makes_a_stage_wait_for_the_other() -> None:
    ops = exchange_schedule([0, 1], (0, 1))
    first_run = next(i for i, o in enumerate(ops) if o.kind == "run")
    # Mirrored: both stages' inputs are received before anything runs.
    assert {(o.layer, o.stage) for o in ops[:first_run]} == {(0, 0), (0, 1)}


def test_one_stage_is_recv_run_per_layer() -> None:
    ops = exchange_schedule([0, 1], (0,))
    assert [(o.kind, o.layer) for o in ops] == [
        ("recv", 0),
        ("run", 0),
        ("recv", 1),
        ("run", 1),
    ]
    assert mirrored(ops) == attention_wire_order([0, 1], 1)
    assert exchange_schedule([0, 1], (0,), pipelined=True) == ops
    assert exchange_schedule([0, 1], ()) == ()
