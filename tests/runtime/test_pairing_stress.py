# SPDX-License-Identifier: Apache-2.0
"""The FFN rank pairs every stage's rows with the right attention rank, layer
and stage when the ranks split their steps unevenly (two micro-batches,
attention DP > 1), through the real connector and the real FFN serving loop.

Two or three attention ranks (threads) share one FFN rank. Every step each
rank draws its own rows per stage, zeros included (an unsplit step, an idle
rank, an empty step), announces them as its runner does and exchanges every
layer in the runner's wire order (send L0 s0, send L0 s1, recv L0 s0, send
L1 s0, recv L0 s1, ...). The FFN side is ``FFNDaemon.run_once`` with
``serve_ffn_step``: it assembles each stage from the ranks' announcements,
batches the stage's rows of all ranks into one FFN call and splits the
output back. Its FFN is row-wise (no row depends on another), so the
reference is the same function on each rank's own rows, unsplit; rows carry
their rank, step, stage and row number, so a row served to the wrong rank,
stage or layer differs. A mismatch names rank, step, stage and layer.

Needs torch (tox env e2e); no vLLM.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
import torch
from test_gloo_connector import Peer

from afd_e2e.launch.plan import free_port
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import ExchangeSpec, LayerExchange
from afd_plugin.connectors.cpu.p2p_gloo import P2pGlooAFDConnector
from afd_plugin.runtime.ffn_daemon import FFNDaemon
from afd_plugin.runtime.ffn_serve import serve_ffn_step
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import stage_payloads

HIDDEN = 8
EXPERTS = 4
LAYERS = 6
STEPS = 200
STAGES = 2
# Layer 1 sends router logits with its rows (the gate on the attention side).
SPEC = ExchangeSpec(
    hidden_size=HIDDEN,
    dtype="float32",
    router_dtype="float32",
    layers=tuple(
        LayerExchange(i, "moe", EXPERTS if i == 1 else 0) for i in range(LAYERS)
    ),
    stages=STAGES,
)
ROWS = (0, 0, 1, 2, 3, 5, 8)
"""Rows a rank may draw for one stage (zeros twice as likely)."""


def ffn(hidden: torch.Tensor, layer: int, logits: torch.Tensor | None) -> torch.Tensor:
    """Row-wise and layer-dependent: each row's output depends only on that
    row, its logits and the layer."""
    out = hidden * (layer + 2) + layer
    if logits is not None:
        out = out + logits.sum(-1, keepdim=True)
    return out


def connector(role: str, rank: int, port: int, ranks: int, transport: str) -> Any:
    config = AFDConfig(
        role=role,
        connector="P2pGlooAFDConnector",
        port=port,
        num_attention_ranks=ranks,
        micro_batches=STAGES,
        connector_extra_config={
            "rendezvous_timeout_s": 60.0,
            "peer_timeout_s": 30.0,
            "transport": transport,
        },
    )
    conn = P2pGlooAFDConnector(config, rank)
    conn.bind(SPEC)
    return conn


def rows_of(rank: int, step: int, stage: int, count: int) -> torch.Tensor:
    """Rows that say whose they are: rank, step, stage and row number."""
    out = torch.randn(count, HIDDEN)
    if count:
        out[:, 0] = rank
        out[:, 1] = step
        out[:, 2] = stage
        out[:, 3] = torch.arange(count, dtype=torch.float32)
    return out


class Mismatch(AssertionError):
    pass


def attention_rank(
    conn: Any, rank: int, ranks: int, plan: list[list[int]], served: list[int]
) -> None:
    """One attention rank: every step announced and exchanged as its runner
    does; every layer's output checked against the unsplit reference."""
    conn.init_afd_connector()
    try:
        for step, counts in enumerate(plan):
            own = [tuple(c if i == rank else 0 for i in range(ranks)) for c in counts]
            for payload in stage_payloads(own, StepKind.EAGER, STAGES):
                conn.control_plane.send_dp_metadata_list(payload)
            inputs = {s: rows_of(rank, step, s, counts[s]) for s in range(STAGES)}
            logits = {s: torch.randn(counts[s], EXPERTS) for s in range(STAGES)}

            def send(layer: int, stage: int, inputs=inputs, logits=logits) -> None:
                extras = {"router_logits": logits[stage]} if layer == 1 else {}
                conn.send_attn_output(inputs[stage], layer, stage, **extras)

            for stage in range(STAGES):
                send(0, stage)
            for layer in range(LAYERS):
                for stage in range(STAGES):
                    got = conn.recv_ffn_output(layer, stage)
                    want = ffn(
                        inputs[stage], layer, logits[stage] if layer == 1 else None
                    )
                    if not torch.equal(got, want):
                        bad = next(
                            i
                            for i in range(want.shape[0])
                            if not torch.equal(got[i], want[i])
                        )
                        raise Mismatch(
                            f"attention rank {rank}, step {step}, stage {stage}, "
                            f"layer {layer}: row {bad} of {want.shape[0]} is "
                            f"{got[bad, :4].tolist()}, the unsplit reference "
                            f"{want[bad, :4].tolist()}"
                        )
                    served[0] += want.shape[0]
                    inputs[stage] = got
                    if layer + 1 < LAYERS:
                        send(layer + 1, stage)
    finally:
        conn.close()


def ffn_rank(conn: Any, steps: int) -> None:
    conn.init_afd_connector()
    layers = list(range(LAYERS))

    def serve(payloads: Any, kind: StepKind) -> None:
        serve_ffn_step(
            conn,
            lambda layer, hidden, logits: ffn(hidden, layer, logits),
            layers,
            payloads,
            kind,
            None,
            torch.device("cpu"),
        )

    daemon = FFNDaemon(conn, serve, lambda _: None)
    try:
        for _ in range(steps):
            daemon.run_once()
    finally:
        conn.close()


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("transport", ["shm", "gloo"])
def test_every_row_comes_back_to_its_rank_stage_and_layer(
    transport: str, ranks: int
) -> None:
    rng = random.Random(f"{transport}-{ranks}")
    plans = [
        [[rng.choice(ROWS) for _ in range(STAGES)] for _ in range(STEPS)]
        for _ in range(ranks)
    ]
    # The shapes the issue names, whatever the draw: every rank idle, only one
    # rank with work, a rank whose whole step is stage 0, stage 0 empty.
    plans[0][0] = [0, 0]
    plans[1][0] = [0, 0]
    plans[0][1], plans[1][1] = [5, 0], [0, 0]
    plans[1][2] = [0, 3]
    if ranks == 3:
        plans[2][0] = [0, 0]
    port = free_port()
    served = [[0] for _ in range(ranks)]
    threads = [Peer(ffn_rank, connector("ffn", 0, port, ranks, transport), STEPS)]
    threads += [
        Peer(
            attention_rank,
            connector("attention", r, port, ranks, transport),
            r,
            ranks,
            plans[r],
            served[r],
        )
        for r in range(ranks)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    took = time.monotonic() - started
    assert not any(t.is_alive() for t in threads), "a rank hung"
    errors = [t.error for t in threads if t.error is not None]
    mismatches = [e for e in errors if isinstance(e, Mismatch)]
    assert not mismatches, mismatches[0]
    assert not errors, errors[0]
    cases = STEPS * STAGES * LAYERS * ranks
    rows = sum(s[0] for s in served)
    expected = sum(sum(step) for plan in plans for step in plan) * LAYERS
    assert rows == expected
    print(
        f"pairing: {transport}, {ranks} attention ranks: {cases} (rank, step, "
        f"stage, layer) cases, {rows} rows checked in {took:.2f} s"
    )
