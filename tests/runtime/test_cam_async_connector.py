# SPDX-License-Identifier: Apache-2.0
"""CAMAsyncAFDConnector with its reference ops (peers in threads): no control
plane; dispatches carry rows, top-k ids, counts, layer and source; the FFN
ranks serve them in arrival order and the attention side combines with its
top-k weights. 2A1F and 1A2F (any A:F), dense layers on the home rank only,
an FFN rank with nothing routed still answering, the async micro-batches at a
request boundary, int8 dispatch, close / re-init; the capacity and pairing
checks are clear errors, never a hang; the Ascend ops fail at init saying
what to install.

Needs torch (the cpu extra, tox env e2e); no vLLM, no torch_npu.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from afd_e2e.launch.plan import free_port
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import DispatchWork, ExchangeSpec, LayerExchange
from afd_plugin.connectors.npu.cam_async import CAMAsyncAFDConnector
from afd_plugin.connectors.npu.cam_async_ops import routed_order
from afd_plugin.connectors.npu.cam_p2p_ops import CamOpsUnavailable
from afd_plugin.wire import AFDWireError

HIDDEN = 8
EXPERTS = 4
TOPK = 2
SPEC = ExchangeSpec(
    hidden_size=HIDDEN,
    dtype="float32",
    router_dtype="float32",
    layers=(LayerExchange(0, "dense", 0), LayerExchange(1, "moe", EXPERTS)),
)


def connector(
    role: str, rank: int, port: int, attention: int, ffn: int, **extra: Any
) -> CAMAsyncAFDConnector:
    config = AFDConfig(
        role=role,
        connector="CAMAsyncAFDConnector",
        port=port,
        num_attention_ranks=attention,
        num_ffn_ranks=ffn,
        compute_gate_on_attention=True,
        connector_extra_config={
            "ops": "reference",
            "rendezvous_timeout_s": 30.0,
            "peer_timeout_s": 10.0,
            **extra,
        },
    )
    return CAMAsyncAFDConnector(config, rank)


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


def run_all(*peers: Peer) -> list[Peer]:
    for peer in peers:
        peer.start()
    for peer in peers:
        peer.join(60)
        assert not peer.is_alive(), "a peer hung"
    return list(peers)


def tokens(rank: int, rows: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * rank + seed)
    return torch.randn(rows, HIDDEN, generator=g)


def routing(rank: int, rows: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + 100 * rank + seed)
    ids = torch.stack(
        [torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(rows)]
    )
    weights = torch.rand(rows, TOPK, generator=g)
    return ids.to(torch.int32), weights


def expected(
    x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, moe: bool
) -> torch.Tensor:
    """What ``serve`` computes, combined: shared 2x plus, per slot, the
    weighted "expert e" (x * (e + 1)); a dense layer is 3x."""
    if not moe:
        return 3 * x
    routed = sum(w[:, k, None] * x * (ids[:, k, None].float() + 1) for k in range(TOPK))
    return 2 * x + routed


def serve(conn: CAMAsyncAFDConnector, count: int) -> list[DispatchWork]:
    """An FFN rank answering ``count`` dispatches with arithmetic "experts"."""
    seen: list[DispatchWork] = []
    for _ in range(count):
        work = conn.recv_dispatch()
        seen.append(work)
        moe = SPEC.layer(work.layer).kind == "moe"
        local = None
        if work.home and work.hidden.shape[0]:
            local = work.hidden * (2 if moe else 3)
        routed = work.routed * (work.routed_experts.float() + 1)[:, None]
        conn.send_combine(work, local, routed)
    return seen


def ffn_rank(conn: CAMAsyncAFDConnector, count: int) -> list[DispatchWork]:
    conn.bind(SPEC)
    conn.init_afd_connector()
    try:
        return serve(conn, count)
    finally:
        conn.close()


def attention_rank(
    conn: CAMAsyncAFDConnector, rows: int, steps: int = 1, starts: tuple[int, ...] = ()
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    conn.bind(SPEC)
    conn.init_afd_connector()
    out = []
    try:
        for step in range(steps):
            conn.note_step_requests(starts)
            x = tokens(conn.rank, rows, step)
            ids, w = routing(conn.rank, rows, step)
            conn.send_attn_output(x, 0, 0)
            dense = conn.recv_ffn_output(0, 0)
            out.append((dense, expected(x, ids, w, moe=False)))
            conn.send_attn_output(x, 1, 0, topk_ids=ids, topk_weights=w)
            moe = conn.recv_ffn_output(1, 0)
            out.append((moe, expected(x, ids, w, moe=True)))
    finally:
        conn.close()
    return out


@pytest.mark.parametrize("transport", ["gloo", "shm"])
def test_2a1f_dispatches_are_served_by_source_and_layer(transport: str) -> None:
    port = free_port()
    ffn = Peer(ffn_rank, connector("ffn", 0, port, 2, 1, transport=transport), 8)
    attention = [
        Peer(
            attention_rank,
            connector("attention", a, port, 2, 1, transport=transport),
            3 + a,
            2,
        )
        for a in range(2)
    ]
    run_all(ffn, *attention)
    for peer in (ffn, *attention):
        assert peer.error is None, peer.error
    for peer in attention:
        for got, want in peer.result:
            torch.testing.assert_close(got, want)
    works = ffn.result
    assert sorted((w.source, w.layer) for w in works) == sorted(
        (a, layer) for a in range(2) for layer in (0, 1) for _ in range(2)
    )
    # Each source's dispatches arrive in its own order: dense, moe, dense, moe.
    for a in range(2):
        assert [w.layer for w in works if w.source == a] == [0, 1, 0, 1]
    for w in works:
        assert w.home and w.hidden.shape[0] == 3 + w.source
        if w.layer == 1:
            assert w.routed.shape[0] == TOPK * w.hidden.shape[0]
            assert torch.all(w.routed_experts[1:] >= w.routed_experts[:-1])
            assert w.expert_counts.sum() == w.routed.shape[0]
        else:
            assert w.routed.shape[0] == 0


def test_1a2f_splits_experts_and_every_ffn_rank_answers() -> None:
    port = free_port()
    # Rank 1 owns experts 2 and 3; route every token to 0 and 1 only in step 1.
    results: dict[str, Any] = {}

    def attention(conn: CAMAsyncAFDConnector) -> None:
        conn.bind(SPEC)
        conn.init_afd_connector()
        try:
            x = tokens(0, 5)
            ids = torch.tensor([[0, 1]] * 5, dtype=torch.int32)
            w = torch.rand(5, TOPK)
            conn.send_attn_output(x, 1, 0, topk_ids=ids, topk_weights=w)
            results["only_rank0"] = (
                conn.recv_ffn_output(1, 0),
                expected(x, ids, w, True),
            )
            ids, w = routing(0, 5)
            conn.send_attn_output(x, 1, 0, topk_ids=ids, topk_weights=w)
            results["both"] = (conn.recv_ffn_output(1, 0), expected(x, ids, w, True))
        finally:
            conn.close()

    ffns = [Peer(ffn_rank, connector("ffn", j, port, 1, 2), 2) for j in range(2)]
    att = Peer(attention, connector("attention", 0, port, 1, 2))
    run_all(*ffns, att)
    for peer in (*ffns, att):
        assert peer.error is None, peer.error
    for got, want in results.values():
        torch.testing.assert_close(got, want)
    first, second = ffns[0].result, ffns[1].result
    assert all(w.home for w in first) and not any(w.home for w in second)
    assert second[0].hidden.shape[0] == 0, "nothing was routed to ffn rank 1"
    assert second[0].expert_counts.tolist() == [0, 0]
    assert set(second[1].routed_experts.tolist()) <= {2, 3}
    assert set(first[1].routed_experts.tolist()) <= {0, 1}


def test_async_ubatching_splits_at_the_request_boundary() -> None:
    port = free_port()
    ffn = Peer(ffn_rank, connector("ffn", 0, port, 1, 1, async_moe_ubatching=True), 4)
    att = Peer(
        attention_rank,
        connector("attention", 0, port, 1, 1, async_moe_ubatching=True),
        7,
        1,
        (0, 2, 5, 7),
    )
    run_all(ffn, att)
    assert ffn.error is None and att.error is None, (ffn.error, att.error)
    for got, want in att.result:
        torch.testing.assert_close(got, want)
    # 7 tokens, requests at 0, 2, 5: the boundary nearest 3.5 is 2... or 5;
    # |2 - 3.5| = |5 - 3.5|, the first wins.
    assert [(w.layer, w.stage, w.hidden.shape[0]) for w in ffn.result] == [
        (0, 0, 2),
        (0, 1, 5),
        (1, 0, 2),
        (1, 1, 5),
    ]


def test_dynamic_quant_dispatches_int8_with_a_scale_per_token() -> None:
    port = free_port()
    ffn = Peer(ffn_rank, connector("ffn", 0, port, 1, 1, dynamicQuant=1), 2)
    att = Peer(attention_rank, connector("attention", 0, port, 1, 1, dynamicQuant=1), 6)
    run_all(ffn, att)
    assert ffn.error is None and att.error is None, (ffn.error, att.error)
    for got, want in att.result:
        assert not torch.equal(got, want), "int8 rows came back exact"
        # One int8 step of the largest entry per token, times the FFN's factor.
        step = want.abs().amax(dim=1, keepdim=True) / 127
        assert torch.all((got - want).abs() <= 5 * step)


def test_capacity_overflow_is_an_error_on_both_sides() -> None:
    port = free_port()
    errors: dict[str, BaseException] = {}

    def attention(conn: CAMAsyncAFDConnector) -> None:
        conn.bind(SPEC)
        conn.init_afd_connector()
        try:
            with pytest.raises(AFDWireError, match="past the capacity of 8"):
                conn.send_attn_output(tokens(0, 9), 0, 0)
            # Within this rank's capacity but past the FFN's.
            assert conn.ops is not None
            conn.ops.capacity = 64
            conn.send_attn_output(tokens(0, 9), 0, 0)
        finally:
            conn.close()

    def ffn(conn: CAMAsyncAFDConnector) -> None:
        conn.bind(SPEC)
        conn.init_afd_connector()
        try:
            conn.recv_dispatch()
        except AFDWireError as exc:
            errors["ffn"] = exc
        finally:
            conn.close()

    run_all(
        Peer(ffn, connector("ffn", 0, port, 1, 1, max_num_tokens_per_rank=8)),
        att := Peer(
            attention, connector("attention", 0, port, 1, 1, max_num_tokens_per_rank=8)
        ),
    )
    assert att.error is None, att.error
    message = str(errors["ffn"])
    assert "attention rank 0" in message and "sent 9 tokens" in message
    assert "max_num_tokens_per_rank" in message


def test_a_combine_asked_out_of_order_is_an_error() -> None:
    port = free_port()

    def attention(conn: CAMAsyncAFDConnector) -> None:
        conn.bind(SPEC)
        conn.init_afd_connector()
        try:
            x = tokens(0, 2)
            conn.send_attn_output(x, 0, 0)
            conn.send_attn_output(x, 0, 1)
            with pytest.raises(
                AFDWireError, match="answered in the order they were dispatched"
            ):
                conn.recv_ffn_output(0, 1)
            conn.recv_ffn_output(0, 0)
        finally:
            conn.close()

    ffn = Peer(ffn_rank, connector("ffn", 0, port, 1, 1), 2)
    att = Peer(attention, connector("attention", 0, port, 1, 1))
    run_all(ffn, att)
    assert ffn.error is None and att.error is None, (ffn.error, att.error)


def test_close_is_safe_and_init_runs_again_on_the_same_port() -> None:
    port = free_port()
    half = connector("attention", 0, port, 1, 1)
    half.close()
    half.close()  # never initialised, twice
    for _ in range(2):
        ffn = Peer(ffn_rank, connector("ffn", 0, port, 1, 1), 2)
        att = Peer(attention_rank, connector("attention", 0, port, 1, 1), 4)
        run_all(ffn, att)
        assert ffn.error is None and att.error is None, (ffn.error, att.error)
        for got, want in att.result:
            torch.testing.assert_close(got, want)


def test_no_control_plane_and_routing_stays_on_attention() -> None:
    conn = connector("attention", 0, free_port(), 1, 1)
    assert conn.control_plane is None
    assert conn.dispatches_topk
    with pytest.raises(RuntimeError, match="no control plane"):
        conn.update_state_from_dp_metadata(None)
    gate_on_ffn = ExchangeSpec(
        hidden_size=HIDDEN,
        dtype="float32",
        router_dtype="float32",
        layers=(LayerExchange(0, "moe", 0),),
    )
    with pytest.raises(AFDWireError, match="compute_gate_on_attention true"):
        conn.bind(gate_on_ffn)


def test_routed_order_sorts_by_expert_and_keeps_token_order() -> None:
    ids = torch.tensor([[3, 1], [1, 2], [0, 3]])
    rows, slots, experts = routed_order(ids, range(1, 4))
    assert experts.tolist() == [1, 1, 2, 3, 3]
    assert list(zip(rows.tolist(), slots.tolist(), strict=True)) == [
        (0, 1),
        (1, 0),
        (1, 1),
        (0, 0),
        (2, 1),
    ]


def test_ascend_ops_fail_at_init_saying_what_to_install() -> None:
    conn = CAMAsyncAFDConnector(
        AFDConfig(
            role="attention",
            connector="CAMAsyncAFDConnector",
            port=free_port(),
            compute_gate_on_attention=True,
            connector_extra_config={"ops": "ascend"},
        ),
        0,
    )
    conn.bind(SPEC)
    with pytest.raises(CamOpsUnavailable) as info:
        conn.init_afd_connector()
    message = str(info.value)
    assert "torch_npu" in message and "umdk_cam_op_lib" in message
    assert "ops: 'reference'" in message
    conn.close()


def test_both_cam_connectors_import_without_torch_npu_and_fail_only_at_init() -> None:
    """AFD-I3/I4 in a fresh interpreter where torch_npu, vllm_ascend and the
    vendor library cannot be imported: the modules import, construction and
    bind pass, and only init_afd_connector() fails, with CamOpsUnavailable."""
    script = """
import sys
for name in ("torch_npu", "vllm_ascend", "umdk_cam_op_lib", "vllm"):
    sys.modules[name] = None
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import ExchangeSpec, LayerExchange
from afd_plugin.connectors.npu.cam_async import CAMAsyncAFDConnector
from afd_plugin.connectors.npu.cam_p2p import CAMP2pAFDConnector
from afd_plugin.connectors.npu.cam_p2p_ops import CamOpsUnavailable
for cls, gate, dtype, width in (
    (CAMAsyncAFDConnector, True, "float32", 4),
    (CAMP2pAFDConnector, False, "bfloat16", 0),
):
    config = AFDConfig(
        role="attention", connector=cls.__name__, compute_gate_on_attention=gate
    )
    conn = cls(config, 0)
    conn.bind(ExchangeSpec(8, dtype, "float32", (LayerExchange(0, "moe", width),)))
    try:
        conn.init_afd_connector()
    except CamOpsUnavailable as exc:
        print(cls.__name__, "CamOpsUnavailable", "torch_npu" in str(exc))
    conn.close()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == [
        "CAMAsyncAFDConnector CamOpsUnavailable True",
        "CAMP2pAFDConnector CamOpsUnavailable True",
    ]
