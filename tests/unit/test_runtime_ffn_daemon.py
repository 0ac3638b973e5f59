# SPDX-License-Identifier: Apache-2.0
"""The FFN daemon against a fake connector: branch selection (profile /
warm-up / capture / replay / eager), state update before any compute or
capture (AFD-I10), one payload per stage with DBO, replay only of captured
graphs, the control-plane branch (AFD-I2), evidence, how the loop ends.

Torch-free: the daemon and the graph cache are platform-neutral.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from afd_plugin import metrics as afd_metrics
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import (
    AFDConnector,
    AFDControlPlane,
    AFDPeerError,
    DispatchWork,
    ExchangeSpec,
    LayerExchange,
)
from afd_plugin.evidence import parse_line
from afd_plugin.runtime.ffn_daemon import FFNDaemon, serving_kind
from afd_plugin.runtime.ffn_graphs import FFNGraphCache
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import stage_payloads
from afd_plugin.wire import AFDControlPayload, AFDWireError


def payload(stage: int = 0, **flags: bool) -> AFDControlPayload:
    return AFDControlPayload(stage_key=stage, token_counts=(3,), max_count=3, **flags)


@pytest.mark.parametrize(
    ("flags", "branch"),
    [
        ({}, StepKind.EAGER),
        ({"is_warmup": True}, StepKind.WARMUP),
        ({"is_profile": True}, StepKind.PROFILE),
        ({"is_graph": True}, StepKind.REPLAY),
        ({"is_graph": True, "is_warmup": True}, StepKind.CAPTURE),
    ],
)
def test_serving_kind(flags: dict[str, bool], branch: StepKind) -> None:
    assert serving_kind(payload(**flags), graph_supported=True) is branch


def test_graph_step_on_an_eager_only_backend_is_a_protocol_error() -> None:
    for flags in ({"is_graph": True}, {"is_graph": True, "is_warmup": True}):
        with pytest.raises(AFDWireError, match="runs eager only"):
            serving_kind(payload(**flags), graph_supported=False)
    assert serving_kind(payload(is_profile=True), False) is StepKind.PROFILE


class FakeControlPlane(AFDControlPlane):
    def __init__(self, events: list[str], steps: list[Any]) -> None:
        self.events, self.steps = events, steps

    def send_dp_metadata_list(self, payload: AFDControlPayload) -> None:
        raise AssertionError("the FFN side never sends payloads")

    def recv_dp_metadata_list(self) -> AFDControlPayload:
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        self.events.append(f"recv:{step.stage_key}")
        return step


class FakeConnector(AFDConnector):
    def __init__(
        self, steps: list[Any], control_plane: bool = True, stages: int = 1
    ) -> None:
        config = AFDConfig(role="ffn", connector="P2pGlooAFDConnector")
        super().__init__(config, 0)
        self.events: list[str] = []
        self.left = False
        self.state: dict[int, AFDControlPayload] = {}
        self.spec = ExchangeSpec(8, "bfloat16", "float32", (LayerExchange(0),), stages)
        if control_plane:
            self.control_plane = FakeControlPlane(self.events, steps)

    def init_afd_connector(self) -> None: ...

    def update_state_from_dp_metadata(self, payload: AFDControlPayload) -> None:
        self.events.append(f"update:{payload.stage_key}")
        self.state[payload.stage_key] = payload

    def send_attn_output(self, *a: Any, **k: Any) -> None: ...

    def recv_ffn_output(self, *a: Any) -> Any: ...

    def recv_attn_output(self, *a: Any) -> Any: ...

    def send_ffn_output(self, *a: Any) -> None: ...

    def close(self) -> None: ...

    def peers_left(self) -> bool:
        return self.left


class RecordingBackend:
    """A graph backend that records when capture and replay happen."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def capture(self, fn: Any) -> tuple[Any, Any]:
        self.events.append("capture-begin")
        out = fn()
        self.events.append("capture-end")
        return "graph", out

    def replay(self, graph: Any) -> None:
        self.events.append(f"replay:{graph}")


def make_daemon(
    connector: FakeConnector,
    exits: list[BaseException | None],
    graphs: FFNGraphCache | None = None,
) -> FFNDaemon:
    def serve(payloads: tuple[AFDControlPayload, ...], branch: StepKind) -> None:
        for p in payloads:
            assert connector.state[p.stage_key] is p, "served before the update"
        connector.events.append(f"serve:{branch.value}")
        if branch is StepKind.CAPTURE:
            assert graphs is not None
            graphs.capture((0, 1, 3), 0, {}, lambda _: connector.events.append("run"))
        if branch is StepKind.REPLAY:
            assert graphs is not None
            graphs.replay((0, 1, 3), 0, lambda _: connector.events.append("fill"))

    return FFNDaemon(connector, serve, exits.append, graphs=graphs)


def test_run_once_updates_state_before_serving() -> None:
    steps = [payload(is_profile=True), payload(is_warmup=True), payload()]
    connector = FakeConnector(steps)
    daemon = make_daemon(connector, [])
    assert [daemon.run_once() for _ in range(3)] == [
        StepKind.PROFILE,
        StepKind.WARMUP,
        StepKind.EAGER,
    ]
    assert connector.events == [
        "recv:0",
        "update:0",
        "serve:profile",
        "recv:0",
        "update:0",
        "serve:warmup",
        "recv:0",
        "update:0",
        "serve:eager",
    ]
    assert daemon.kinds == {
        StepKind.PROFILE: 1,
        StepKind.WARMUP: 1,
        StepKind.EAGER: 1,
    }


def test_capture_happens_after_the_control_plane_and_outside_it() -> None:
    capture = payload(is_graph=True, is_warmup=True)
    replay = payload(is_graph=True)
    connector = FakeConnector([capture, replay])
    graphs = FFNGraphCache(RecordingBackend(connector.events))
    daemon = make_daemon(connector, [], graphs)
    assert daemon.run_once() is StepKind.CAPTURE
    assert daemon.run_once() is StepKind.REPLAY
    events = connector.events
    begin, end = events.index("capture-begin"), events.index("capture-end")
    # recv and state update come first; nothing of the control plane is
    # inside the captured region.
    assert events[:begin] == ["recv:0", "update:0", "serve:capture"]
    assert events[begin + 1 : end] == ["run"]
    # The replay fills the static inputs, then replays the captured graph.
    assert events[end + 1 :] == [
        "recv:0",
        "update:0",
        "serve:replay",
        "fill",
        "replay:graph",
    ]


def test_replay_of_a_size_never_captured_names_the_key() -> None:
    connector = FakeConnector([payload(is_graph=True)])
    graphs = FFNGraphCache(RecordingBackend(connector.events))
    with pytest.raises(AFDWireError, match=r"key \(stage=0, ranks=1, max_count=3\)"):
        make_daemon(connector, [], graphs).run_once()
    assert "serve:replay" not in connector.events


def test_two_stages_are_received_and_applied_before_serving() -> None:
    split = stage_payloads([(4,), (3,)], "eager", stages=2)
    connector = FakeConnector(list(split), stages=2)
    daemon = make_daemon(connector, [])
    assert daemon.run_once() is StepKind.EAGER
    assert connector.events == [
        "recv:0",
        "update:0",
        "recv:1",
        "update:1",
        "serve:eager",
    ]


def test_dual_micro_batch_steps_leave_evidence(caplog: Any) -> None:
    split = stage_payloads([(4,), (3,)], "eager", stages=2)
    single = stage_payloads([(4,)], "eager", stages=2)
    connector = FakeConnector([*split, *single], stages=2)
    daemon = make_daemon(connector, [])
    with caplog.at_level(logging.INFO, logger="afd_plugin"):
        daemon.run_once()
        daemon.run_once()
    records = [r for r in map(parse_line, caplog.messages) if r is not None]
    assert [(r.role, r.rank, r.step, r.tokens) for r in records] == [
        ("ffn", 0, 1, (4, 3))
    ]


def test_stage_out_of_order_or_disagreeing_kind_is_refused() -> None:
    connector = FakeConnector([payload(stage=1), payload()], stages=2)
    with pytest.raises(AFDWireError, match="expected the control payload of stage 0"):
        make_daemon(connector, []).run_once()
    mixed = [payload(), payload(stage=1, is_warmup=True)]
    with pytest.raises(AFDWireError, match="disagree on the step kind"):
        make_daemon(FakeConnector(mixed, stages=2), []).run_once()


def test_connector_without_control_plane_is_not_served_by_this_loop() -> None:
    daemon = make_daemon(FakeConnector([], control_plane=False), [])
    with pytest.raises(NotImplementedError, match="no control plane"):
        daemon.run_once()


def run_loop(connector: FakeConnector) -> tuple[FFNDaemon, list[Any]]:
    exits: list[BaseException | None] = []
    daemon = make_daemon(connector, exits)
    daemon.start()
    daemon._thread.join(10)
    assert not daemon.alive
    return daemon, exits


def test_orderly_leave_of_the_attention_side_ends_the_loop_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[object] = []
    monkeypatch.setattr(afd_metrics, "count_failure", lambda *a: counted.append(a))
    lost = AFDPeerError("connection closed")
    connector = FakeConnector([payload(), payload(), lost])
    connector.left = True
    daemon, exits = run_loop(connector)
    assert exits == [None] and daemon.error is None
    assert daemon.kinds[StepKind.EAGER] == 2
    assert counted == []  # an orderly end is no failure


def test_lost_peer_ends_the_loop_with_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted: list[tuple[str, int, BaseException]] = []
    monkeypatch.setattr(
        afd_metrics, "count_failure", lambda *args: counted.append(args)
    )
    lost = AFDPeerError("ffn rank 0 lost attention rank 0")
    daemon, exits = run_loop(FakeConnector([payload(), lost]))
    assert exits == [lost] and daemon.error is lost
    # Counted once, as this rank's failure (afd:exchange_failures_total).
    assert counted == [("ffn", daemon.connector.rank, lost)]


def test_any_failure_while_serving_is_reported() -> None:
    daemon, exits = run_loop(FakeConnector([payload(is_graph=True)]))
    assert isinstance(exits[0], AFDWireError)


def test_stop_requested_suppresses_the_exit_callback() -> None:
    gate = threading.Event()

    class Blocking(FakeConnector):
        def update_state_from_dp_metadata(self, p: AFDControlPayload) -> None:
            gate.wait(10)
            raise AFDPeerError("closed while stopping")

    connector = Blocking([payload()])
    exits: list[BaseException | None] = []
    daemon = make_daemon(connector, exits)
    daemon.start()
    daemon.stop()
    gate.set()
    daemon._thread.join(10)
    assert exits == [] and daemon.error is None


class Rows:
    """A stand-in for a tensor: only its row count is read."""

    def __init__(self, rows: int) -> None:
        self.shape = (rows, 8)


def dispatch(source: int, stage: int, layer: int = 0) -> DispatchWork:
    return DispatchWork(
        layer=layer,
        stage=stage,
        source=source,
        hidden=Rows(3),
        home=True,
        routed=Rows(6),
        routed_experts=Rows(6),
        expert_counts=Rows(2),
    )


class DrivingConnector(FakeConnector):
    """No control plane: dispatches arrive in the order given."""

    def __init__(self, works: list[Any]) -> None:
        super().__init__([], control_plane=False)
        self.works = works

    def recv_dispatch(self) -> DispatchWork:
        work = self.works.pop(0)
        if isinstance(work, BaseException):
            raise work
        self.events.append(f"dispatch:{work.source}/{work.stage}/{work.layer}")
        return work


def test_without_a_control_plane_the_daemon_serves_dispatches_as_they_come(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """AFD-I2: no payload is received, no state updated; each dispatch is
    served with the layer it names, in arrival order, eagerly."""
    works = [dispatch(1, 0, 0), dispatch(0, 0, 0), dispatch(1, 1, 0), dispatch(1, 0, 1)]
    connector = DrivingConnector(list(works))
    served: list[DispatchWork] = []
    daemon = FFNDaemon(
        connector, lambda *_: None, lambda _: None, serve_dispatch=served.append
    )
    with caplog.at_level(logging.INFO, logger="afd_plugin"):
        kinds = [daemon.run_once() for _ in works]
    assert kinds == [StepKind.EAGER] * 4
    assert served == works
    assert connector.events == [
        "dispatch:1/0/0",
        "dispatch:0/0/0",
        "dispatch:1/1/0",
        "dispatch:1/0/1",
    ]
    assert daemon.dispatches == {(1, 0): 2, (0, 0): 1, (1, 1): 1}
    firsts = [
        r.getMessage() for r in caplog.records if "first dispatch" in r.getMessage()
    ]
    assert len(firsts) == 3  # one per (source, stage)
    assert (
        "from attention rank 1, stage 0 (layer 0, 3 tokens, 6 routed rows)" in firsts[0]
    )


def test_without_a_control_plane_there_is_no_graph_cache() -> None:
    graphs = FFNGraphCache(RecordingBackend([]))
    with pytest.raises(RuntimeError, match="runs eager only"):
        FFNDaemon(DrivingConnector([]), lambda *_: None, lambda _: None, graphs=graphs)


def test_a_lost_attention_rank_ends_the_connector_driven_loop_with_its_error() -> None:
    lost = AFDPeerError(
        "AFD ffn rank 0 failed receiving dispatch 7 with attention rank 1"
    )
    exits: list[BaseException | None] = []
    connector = DrivingConnector([dispatch(0, 0), lost])
    daemon = FFNDaemon(
        connector, lambda *_: None, exits.append, serve_dispatch=lambda _: None
    )
    daemon.start()
    daemon._thread.join(10)
    assert not daemon.alive
    assert exits == [lost] and daemon.steps == 1
