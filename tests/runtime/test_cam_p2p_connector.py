# SPDX-License-Identifier: Apache-2.0
"""CAMP2pAFDConnector with its reference ops (peers in threads): the strided
groups of 2A1F and 3A2F move every rank's rows to the right place and back,
close / re-init on one port, and what the CAM P2P hardware contract would
silently get wrong is a clear error on the reference ops, never a hang:
unequal counts in one FFN group, a stage paired out of order, a window
overflow. Choosing the Ascend ops on this machine fails at init, saying what
to build or install; the op schemas' shape functions hold on meta tensors.

Needs torch (the cpu extra, tox env e2e); no vLLM, no torch_npu.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from afd_e2e.launch.plan import free_port
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import ExchangeSpec, LayerExchange
from afd_plugin.connectors.npu import cam_p2p_ops
from afd_plugin.connectors.npu.cam_p2p import CAMP2pAFDConnector
from afd_plugin.connectors.npu.cam_p2p_reference import CamContractError
from afd_plugin.wire import AFDControlPayload, AFDWireError

HIDDEN = 8
SPEC = ExchangeSpec(
    hidden_size=HIDDEN,
    dtype="bfloat16",
    router_dtype="float32",
    layers=(LayerExchange(0, "dense", 0), LayerExchange(1, "moe", 0)),
)
TWO_STAGES = ExchangeSpec(
    hidden_size=HIDDEN,
    dtype="bfloat16",
    router_dtype="float32",
    layers=SPEC.layers,
    stages=2,
)


def connector(
    role: str,
    rank: int,
    port: int,
    attention: int,
    ffn: int,
    transport: str = "auto",
    **extra: Any,
) -> CAMP2pAFDConnector:
    config = AFDConfig(
        role=role,
        connector="CAMP2pAFDConnector",
        port=port,
        num_attention_ranks=attention,
        num_ffn_ranks=ffn,
        connector_extra_config={
            "ops": "reference",
            "rendezvous_timeout_s": 30.0,
            "peer_timeout_s": 10.0,
            "transport": transport,
            **extra,
        },
    )
    return CAMP2pAFDConnector(config, rank)


def marked(rank: int, rows: int) -> torch.Tensor:
    """Rows that say which attention rank sent them."""
    base = torch.arange(rows * HIDDEN, dtype=torch.float32).view(rows, HIDDEN)
    return (base / 64 + rank).to(torch.bfloat16)


class Peer(threading.Thread):
    def __init__(self, target: Callable[..., Any], *args: Any) -> None:
        super().__init__(daemon=True)
        self.error: BaseException | None = None
        self.result: Any = None
        self._call = (target, args)

    def run(self) -> None:
        target, args = self._call
        try:
            self.result = target(*args)
        except BaseException as exc:  # reported to the test
            self.error = exc

    def finish(self) -> BaseException | None:
        self.join(30)
        assert not self.is_alive(), "the peer thread hung"
        return self.error


def run_all(*peers: Peer) -> list[Peer]:
    for peer in peers:
        peer.start()
    for peer in peers:
        peer.join(40)
        assert not peer.is_alive(), "a peer hung"
    return list(peers)


def ffn_serve(conn: CAMP2pAFDConnector, steps: int = 1) -> list[torch.Tensor]:
    seen = []
    conn.bind(SPEC)
    conn.init_afd_connector()
    try:
        for _ in range(steps):
            payload = conn.control_plane.recv_dp_metadata_list()
            conn.update_state_from_dp_metadata(payload)
            for layer in (0, 1):
                hidden, extras = conn.recv_attn_output(layer, 0)
                assert extras == {}
                seen.append(hidden.clone())
                conn.send_ffn_output(hidden * 2, layer, 0)
    finally:
        conn.close()
    return seen


def attention_step(conn: CAMP2pAFDConnector, counts: tuple[int, ...]) -> None:
    conn.bind(SPEC)
    conn.init_afd_connector()
    try:
        payload = AFDControlPayload(0, counts, max(counts))
        conn.control_plane.send_dp_metadata_list(payload)
        mine = counts[list(conn.block).index(conn.rank)]
        for layer in (0, 1):
            hidden = marked(conn.rank, mine)
            conn.send_attn_output(hidden, layer, 0)
            out = conn.recv_ffn_output(layer, 0)
            assert out.dtype == torch.bfloat16 and torch.equal(out, hidden * 2)
    finally:
        conn.close()


@pytest.mark.parametrize("attention,ffn", [(2, 1), (3, 2)])
def test_strided_groups_move_each_slot_to_its_rank(attention: int, ffn: int) -> None:
    port = free_port()
    rows = 3
    ffns = [
        Peer(ffn_serve, connector("ffn", r, port, attention, ffn)) for r in range(ffn)
    ]
    attns = []
    for a in range(attention):
        conn = connector("attention", a, port, attention, ffn)
        # Attention a is in slot a // F of FFN a % F.
        assert conn.ffn_peer == a % ffn
        assert list(conn.block) == list(range(a % ffn, attention, ffn))
        attns.append(Peer(attention_step, conn, (rows,) * len(conn.block)))
    errors = [p.error for p in run_all(*ffns, *attns) if p.error is not None]
    assert [repr(e) for e in errors] == []
    for r, peer in enumerate(ffns):
        group = range(r, attention, ffn)
        expected = torch.cat([marked(a, rows) for a in group])
        # Two layers, each the group's rows in slot order.
        assert [t.shape[0] for t in peer.result] == [rows * len(group)] * 2
        assert all(torch.equal(t, expected) for t in peer.result)


def test_close_and_reinit_on_the_same_port() -> None:
    port = free_port()

    def ffn_twice() -> None:
        for _ in range(2):
            ffn_serve(connector("ffn", 0, port, 1, 1))

    def attention_twice() -> None:
        conn = connector("attention", 0, port, 1, 1)
        for _ in range(2):
            attention_step(conn, (4,))
            conn.close()  # twice is safe

    for peer in run_all(Peer(ffn_twice), Peer(attention_twice)):
        assert peer.error is None, peer.error


def test_unequal_counts_in_one_group_fail_on_both_sides() -> None:
    port = free_port()
    ffn = Peer(ffn_serve, connector("ffn", 0, port, 2, 1))
    attns = [
        Peer(attention_step, connector("attention", a, port, 2, 1), (3, 5))
        for a in range(2)
    ]
    peers = run_all(ffn, *attns)
    for peer in peers:
        assert isinstance(peer.error, AFDWireError), peer.error
        assert "needs equal token counts inside one FFN group" in str(peer.error)
        assert "attention 0: 3, attention 1: 5" in str(peer.error)


def raw_op_peers(
    port: int,
    attention_calls: Callable[[CAMP2pAFDConnector], None],
    ffn_calls: Callable[[CAMP2pAFDConnector], None],
    attention: int = 2,
    spec: ExchangeSpec = SPEC,
) -> list[Peer]:
    """Peers that call the ops directly (no connector checks), then hold
    their end open a moment so the other side's error is its own."""

    def run(conn: CAMP2pAFDConnector, calls: Callable[[CAMP2pAFDConnector], None]):
        conn.bind(spec)
        conn.init_afd_connector()
        try:
            calls(conn)
            time.sleep(0.5)
        finally:
            conn.close()

    ffn = Peer(run, connector("ffn", 0, port, attention, 1), ffn_calls)
    attns = [
        Peer(run, connector("attention", a, port, attention, 1), attention_calls)
        for a in range(attention)
    ]
    return run_all(ffn, *attns)


def a2e(conn: CAMP2pAFDConnector, x: torch.Tensor, rows: int, stage: int = 0):
    call = cam_p2p_ops.CamCall(
        rows,
        HIDDEN,
        0,
        conn.layout.num_ffn,
        conn.layout.num_attention,
        conn.global_rank,
        conn.group_ep(stage),
        8,
    )
    return cam_p2p_ops.a2e(x, call)


def test_the_reference_a2e_refuses_unequal_rows_in_a_group() -> None:
    def push(conn: CAMP2pAFDConnector) -> None:
        rows = 3 + 2 * conn.rank  # attention 0: 3 rows, attention 1: 5
        a2e(conn, marked(conn.rank, rows), rows)

    def gather(conn: CAMP2pAFDConnector) -> None:
        a2e(conn, torch.empty(0, HIDDEN, dtype=torch.bfloat16), 3)

    ffn, *attns = raw_op_peers(free_port(), push, gather)
    assert isinstance(ffn.error, CamContractError)
    assert "unequal token counts inside one FFN group" in str(ffn.error)
    assert "attention rank 1 sent 5 rows where every slot must send 3" in str(ffn.error)
    assert all(p.error is None for p in attns)  # a2e does not wait on attention


def test_the_reference_ops_refuse_a_stage_paired_out_of_order() -> None:
    def push_stage_1_first(conn: CAMP2pAFDConnector) -> None:
        a2e(conn, marked(conn.rank, 2), 2, stage=1)

    def gather_stage_0(conn: CAMP2pAFDConnector) -> None:
        a2e(conn, torch.empty(0, HIDDEN, dtype=torch.bfloat16), 2, stage=0)

    ffn, attn = raw_op_peers(
        free_port(),
        push_stage_1_first,
        gather_stage_0,
        attention=1,
        spec=TWO_STAGES,
    )
    assert isinstance(ffn.error, CamContractError)
    assert "received stage 1's call" in str(ffn.error)
    assert "paired out of order" in str(ffn.error)
    assert attn.error is None


def test_the_reference_ops_refuse_a_window_overflow() -> None:
    port = free_port()

    def overflow(conn: CAMP2pAFDConnector) -> None:
        a2e(conn, marked(0, 5), 5)

    def idle(conn: CAMP2pAFDConnector) -> None:
        return None

    def run(conn: CAMP2pAFDConnector, calls: Callable[..., None]) -> None:
        conn.bind(SPEC)
        conn.init_afd_connector()
        try:
            calls(conn)
        finally:
            conn.close()

    small = {"max_num_tokens_per_rank": 4}
    ffn = Peer(run, connector("ffn", 0, port, 1, 1, **small), idle)
    attn = Peer(run, connector("attention", 0, port, 1, 1, **small), overflow)
    run_all(ffn, attn)
    assert isinstance(attn.error, CamContractError)
    assert "a2e of 5 rows per slot overflows the window of 4 rows" in str(attn.error)


def test_a_float32_model_is_refused_at_bind() -> None:
    conn = connector("attention", 0, free_port(), 1, 1)
    spec = ExchangeSpec(HIDDEN, "float32", "float32", SPEC.layers)
    with pytest.raises(AFDWireError, match="start both roles with --dtype bfloat16"):
        conn.bind(spec)


def test_ascend_ops_fail_at_init_saying_what_to_install() -> None:
    """No torch_npu here: construction and bind pass, init fails at once
    (before any rendezvous: no peer is running) with what to do."""
    config = AFDConfig(
        role="attention",
        connector="CAMP2pAFDConnector",
        port=free_port(),
        connector_extra_config={"ops": "ascend", "rendezvous_timeout_s": 60.0},
    )
    conn = CAMP2pAFDConnector(config, 0)
    conn.bind(SPEC)
    started = time.monotonic()
    with pytest.raises(cam_p2p_ops.CamOpsUnavailable) as failed:
        conn.init_afd_connector()
    assert time.monotonic() - started < 5
    message = str(failed.value)
    assert "needs torch_npu" in message
    assert "AFD_BUILD_ASCEND_OPS=1" in message
    assert "afd_plugin._C_ascend" in message
    assert "set additional_config.afd.connector_extra_config.ops to 'reference'" in (
        message
    )
    conn.close()


@pytest.mark.parametrize("attention,ffn", [(2, 1), (3, 2), (4, 4)])
def test_op_shapes_on_meta_tensors(attention: int, ffn: int) -> None:
    x = torch.empty(6, HIDDEN, device="meta", dtype=torch.bfloat16)
    for rank in range(attention + ffn):
        outs = torch.ops.afd_ascend.a2e(
            x, None, None, 6, HIDDEN, 2, ffn, attention, rank, "afd", 8, False
        )
        slots = len(range(rank, attention, ffn)) if rank < ffn else 0
        assert [tuple(t.shape) for t in outs] == [
            (6 * slots, HIDDEN),
            (6 * slots, 2),
            (6 * slots, 2),
            (-(-attention // ffn),),
            (6 * slots,),
        ]
        back = torch.ops.afd_ascend.e2a(
            outs[0], outs[3], 6, HIDDEN, 2, ffn, attention, rank, "afd", 8
        )
        assert tuple(back.shape) == ((6 if rank >= ffn else 0), HIDDEN)
        assert back.dtype == torch.bfloat16


def test_the_build_switch_names_its_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, expected in (("", None), ("ON", True), ("0", False), ("no", False)):
        monkeypatch.setenv(cam_p2p_ops.BUILD_SWITCH, raw)
        assert cam_p2p_ops.build_switch() is expected
    monkeypatch.setenv(cam_p2p_ops.BUILD_SWITCH, "maybe")
    with pytest.raises(ValueError, match="1/true/yes/on .* 0/false/no/off"):
        cam_p2p_ops.build_switch()
