# SPDX-License-Identifier: Apache-2.0
"""Standby FFN servers, at the connector: the FFN daemon and ``serve_ffn_step``
in real processes (a toy FFN instead of vLLM's), attention ranks in threads
of this process (the first hosts the rendezvous). The active FFN process
exits mid-step (``os._exit``: no leave, as a SIGKILL); a standby takes over
and every step's outputs still equal what the toy FFN computes.

Needs torch (the cpu extra, tox env e2e); no vLLM.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading
import time
from typing import Any

import pytest
import torch

from afd_e2e.launch.plan import free_port
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import AFDPeerError, ExchangeSpec, LayerExchange
from afd_plugin.connectors.cpu.p2p_gloo import P2pGlooAFDConnector
from afd_plugin.wire import AFDControlPayload

HIDDEN = 8
EXPERTS = 4
LAYERS = (0, 1, 2, 3)
STEPS = 6


def spec(stages: int) -> ExchangeSpec:
    return ExchangeSpec(
        hidden_size=HIDDEN,
        dtype="float32",
        router_dtype="float32",
        layers=tuple(LayerExchange(i, "moe", EXPERTS) for i in LAYERS),
        stages=stages,
    )


def config(
    role: str, port: int, transport: str, attention: int, standbys: int, **kw: Any
) -> AFDConfig:
    return AFDConfig(
        role=role,
        connector="P2pGlooAFDConnector",
        port=port,
        num_attention_ranks=attention,
        num_ffn_standby=standbys,
        connector_extra_config={
            "rendezvous_timeout_s": 60,
            "peer_timeout_s": 15,
            "transport": transport,
        },
        **kw,
    )


def toy_ffn(layer: int, hidden: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    return hidden * 2 + logits.sum(-1, keepdim=True) + layer


# -- FFN processes ----------------------------------------------------------------


def ffn_main(
    port: int,
    transport: str,
    attention: int,
    standbys: int,
    stages: int,
    standby: bool,
    die_at: tuple[int, int] | None,
    events: Any,
) -> None:
    from afd_plugin.runtime.ffn_daemon import FFNDaemon
    from afd_plugin.runtime.ffn_serve import serve_ffn_step

    logging.basicConfig(level=logging.INFO)
    conn = P2pGlooAFDConnector(
        config("ffn", port, transport, attention, standbys, standby=standby), 0
    )
    conn.bind(spec(stages))
    conn.init_afd_connector()
    events.put(("ready", os.getpid()))

    def run_layer(layer: int, hidden: torch.Tensor, logits: Any) -> torch.Tensor:
        if die_at is not None and (conn.step, layer) == die_at:
            os._exit(9)  # mid-step, no orderly leave: as a SIGKILL
        return toy_ffn(layer, hidden, logits)

    done = threading.Event()

    def serve(payloads: Any, kind: Any) -> None:
        serve_ffn_step(
            conn, run_layer, LAYERS, payloads, kind, None, torch.device("cpu")
        )

    def on_exit(error: BaseException | None) -> None:
        events.put(("exit", os.getpid(), repr(error) if error else None))
        done.set()

    daemon = FFNDaemon(conn, serve, on_exit)
    daemon.start()
    done.wait()
    conn.close()


def start_ffn(ctx: Any, events: Any, *args: Any) -> Any:
    proc = ctx.Process(target=ffn_main, args=(*args, events), daemon=True)
    proc.start()
    return proc


# -- attention ranks ------------------------------------------------------------


def one_step(
    conn: P2pGlooAFDConnector,
    stages: int,
    attention: int,
    rank: int,
    generator: torch.Generator,
) -> None:
    """One step, every stage through every layer in the micro-batch wire
    order (send L s0, send L s1, recv L s0, send L+1 s0, ...); each output
    checked against the toy FFN."""
    counts = [3 + s for s in range(stages)]
    for s in range(stages):
        # One stage: every rank announces the block's counts; two: each
        # its own micro-batch, the others' entries 0.
        entries = tuple(
            counts[s] if stages == 1 or a == rank else 0 for a in range(attention)
        )
        conn.control_plane.send_dp_metadata_list(
            AFDControlPayload(s, entries, max(entries))
        )
    sent: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def send(layer: int, s: int) -> None:
        hidden = torch.randn(counts[s], HIDDEN, generator=generator)
        logits = torch.randn(counts[s], EXPERTS, generator=generator)
        sent[(layer, s)] = (hidden, logits)
        conn.send_attn_output(hidden, layer, s, router_logits=logits)

    def check(layer: int, s: int) -> None:
        hidden, logits = sent.pop((layer, s))
        out = conn.recv_ffn_output(layer, s)
        assert torch.equal(out, toy_ffn(layer, hidden, logits)), (layer, s)

    for s in range(stages):
        send(LAYERS[0], s)
    for i, layer in enumerate(LAYERS):
        for s in range(stages):
            check(layer, s)
            if i + 1 < len(LAYERS):
                send(LAYERS[i + 1], s)


def attention_steps(
    conn: P2pGlooAFDConnector, stages: int, attention: int, rank: int
) -> None:
    generator = torch.Generator().manual_seed(rank)
    for _ in range(STEPS):
        one_step(conn, stages, attention, rank, generator)


def run_attention(
    port: int,
    transport: str,
    attention: int,
    standbys: int,
    stages: int,
    events: Any,
    servers: int = 2,
) -> tuple[list[P2pGlooAFDConnector], list[BaseException | None]]:
    """The attention ranks' steps, once every FFN server (standbys too) has
    joined: the first attention rank hosts the rendezvous they join."""
    conns = [
        P2pGlooAFDConnector(
            config("attention", port, transport, attention, standbys), rank
        )
        for rank in range(attention)
    ]
    errors: list[BaseException | None] = [None] * attention

    joined = threading.Event()

    def main(rank: int) -> None:
        try:
            conns[rank].bind(spec(stages))
            conns[rank].init_afd_connector()
            assert joined.wait(60), "an FFN server never joined"
            attention_steps(conns[rank], stages, attention, rank)
        except BaseException as exc:  # reported to the test
            errors[rank] = exc

    threads = [threading.Thread(target=main, args=(r,)) for r in range(attention)]
    for t in threads:
        t.start()
    ready = [e for e in drain(events, servers) if e[0] == "ready"]
    assert len(ready) == servers, ready
    joined.set()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "an attention rank hung"
    return conns, errors


def drain(events: Any, count: int, timeout: float = 60) -> list[tuple]:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            got.append(events.get(timeout=max(0.1, deadline - time.monotonic())))
        except Exception:  # queue.Empty
            break
    return got


CASES = [
    # transport, attention ranks, stages, where the active FFN dies (step, layer)
    ("shm", 1, 1, (3, 2)),
    ("gloo", 1, 1, (3, 2)),
    ("shm", 1, 2, (2, 1)),
    ("gloo", 1, 2, (4, 3)),
    ("shm", 2, 1, (3, 1)),
    ("gloo", 2, 2, (2, 2)),
]


@pytest.mark.parametrize(("transport", "attention", "stages", "die_at"), CASES)
def test_a_standby_takes_over_mid_step_and_every_output_stays_right(
    transport: str,
    attention: int,
    stages: int,
    die_at: tuple[int, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="afd_plugin")
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    port = free_port()
    common = (port, transport, attention, 1, stages)
    active = start_ffn(ctx, events, *common, False, die_at)
    standby = start_ffn(ctx, events, *common, True, None)
    try:
        conns, errors = run_attention(port, transport, attention, 1, stages, events)
        assert errors == [None] * attention
        assert all(c.incarnation == 1 for c in conns)
        lines = [
            r.getMessage() for r in caplog.records if "failover:" in r.getMessage()
        ]
        assert len(lines) == attention, lines
        assert f"pid {standby.pid}" in lines[0] and f"pid {active.pid}" in lines[0]
        for conn in conns:  # every rank leaves before the FFN side reads a close
            assert conn.world is not None
            conn.world.announce_leave()
        for conn in conns:
            conn.close()
        active.join(30)
        assert active.exitcode == 9  # it died mid-step, as planned
        standby.join(30)
        assert standby.exitcode == 0
        exits = [e for e in drain(events, 1) if e[0] == "exit"]
        assert exits == [("exit", standby.pid, None)], exits
    finally:
        for proc in (active, standby):
            if proc.is_alive():
                proc.kill()
                proc.join(10)


def test_without_a_standby_left_the_failure_names_the_peer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two deaths, one standby: the first fails over, the second fails the
    step as before, naming the peer and that no standby took its place."""
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    port = free_port()
    common = (port, "shm", 1, 1, 1)
    active = start_ffn(ctx, events, *common, False, (2, 1))
    standby = start_ffn(ctx, events, *common, True, (4, 2))
    try:
        started = time.monotonic()
        conns, errors = run_attention(port, "shm", 1, 1, 1, events)
        assert isinstance(errors[0], AFDPeerError), errors
        text = str(errors[0])
        assert "No standby took its place" in text
        assert "no standby FFN server is waiting" in text
        assert "ffn rank 0" in text
        assert time.monotonic() - started < 60
        assert conns[0].incarnation == 1
        conns[0].close()
    finally:
        for proc in (active, standby):
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(10)
