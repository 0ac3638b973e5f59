"""The FFN daemon against a fake connector: branch selection, state update
before any compute (AFD-I10), the control-plane branch (AFD-I2), how it ends.

Torch-free: the daemon is platform-neutral and imports no tensor library.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import AFDConnector, AFDControlPlane, AFDPeerError
from afd_plugin.runtime.ffn_daemon import FFNBranch, FFNDaemon, select_branch
from afd_plugin.wire import AFDControlPayload, AFDWireError


def payload(**flags: bool) -> AFDControlPayload:
    return AFDControlPayload(stage_key=0, token_counts=(3,), max_count=3, **flags)


@pytest.mark.parametrize(
    ("flags", "branch"),
    [
        ({}, FFNBranch.EAGER),
        ({"is_warmup": True}, FFNBranch.WARMUP),
        ({"is_profile": True}, FFNBranch.PROFILE),
        ({"is_profile": True, "is_graph": True}, FFNBranch.PROFILE),
        ({"is_graph": True}, FFNBranch.GRAPH),
        ({"is_graph": True, "is_warmup": True}, FFNBranch.GRAPH),
    ],
)
def test_select_branch(flags: dict[str, bool], branch: FFNBranch) -> None:
    assert select_branch(payload(**flags), graph_supported=True) is branch


def test_graph_step_on_an_eager_only_backend_is_a_protocol_error() -> None:
    with pytest.raises(AFDWireError, match="runs eager only"):
        select_branch(payload(is_graph=True), graph_supported=False)
    assert select_branch(payload(is_profile=True, is_graph=True), False) is (
        FFNBranch.PROFILE
    )


class FakeControlPlane(AFDControlPlane):
    def __init__(self, events: list[str], steps: list[Any]) -> None:
        self.events, self.steps = events, steps

    def send_dp_metadata_list(self, payload: AFDControlPayload) -> None:
        raise AssertionError("the FFN side never sends payloads")

    def recv_dp_metadata_list(self) -> AFDControlPayload:
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        self.events.append("recv")
        return step


class FakeConnector(AFDConnector):
    def __init__(self, steps: list[Any], control_plane: bool = True) -> None:
        config = AFDConfig(role="ffn", connector="P2pGlooAFDConnector")
        super().__init__(config, 0, None)
        self.events: list[str] = []
        self.left = False
        self.state: AFDControlPayload | None = None
        if control_plane:
            self.control_plane = FakeControlPlane(self.events, steps)

    def init_afd_connector(self) -> None: ...

    def update_state_from_dp_metadata(self, payload: AFDControlPayload) -> None:
        self.events.append("update")
        self.state = payload

    def send_attn_output(self, *a: Any, **k: Any) -> None: ...

    def recv_ffn_output(self, *a: Any) -> Any: ...

    def recv_attn_output(self, *a: Any) -> Any: ...

    def send_ffn_output(self, *a: Any) -> None: ...

    def close(self) -> None: ...

    def peers_left(self) -> bool:
        return self.left


def make_daemon(
    connector: FakeConnector, exits: list[BaseException | None]
) -> FFNDaemon:
    def serve(p: AFDControlPayload, branch: FFNBranch) -> None:
        assert connector.state is p, "served before the connector state update"
        connector.events.append(f"serve:{branch.value}")

    return FFNDaemon(connector, serve, exits.append)


def test_run_once_updates_state_before_serving() -> None:
    steps = [payload(is_profile=True), payload(is_warmup=True), payload()]
    connector = FakeConnector(steps)
    daemon = make_daemon(connector, [])
    assert [daemon.run_once() for _ in range(3)] == [
        FFNBranch.PROFILE,
        FFNBranch.WARMUP,
        FFNBranch.EAGER,
    ]
    assert connector.events == [
        "recv",
        "update",
        "serve:profile",
        "recv",
        "update",
        "serve:warmup",
        "recv",
        "update",
        "serve:eager",
    ]
    assert daemon.branches == {
        FFNBranch.PROFILE: 1,
        FFNBranch.WARMUP: 1,
        FFNBranch.EAGER: 1,
    }


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


def test_orderly_leave_of_the_attention_side_ends_the_loop_cleanly() -> None:
    lost = AFDPeerError("connection closed")
    connector = FakeConnector([payload(), payload(), lost])
    connector.left = True
    daemon, exits = run_loop(connector)
    assert exits == [None] and daemon.error is None
    assert daemon.branches[FFNBranch.EAGER] == 2


def test_lost_peer_ends_the_loop_with_the_error() -> None:
    lost = AFDPeerError("ffn rank 0 lost attention rank 0")
    daemon, exits = run_loop(FakeConnector([payload(), lost]))
    assert exits == [lost] and daemon.error is lost


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
