"""The FFN role's daemon: receive each step's control payloads (one per
micro-batch stage), update the connector, pick the branch (profile / warm-up /
capture / replay / eager), serve the step.

Platform-neutral and pure; the step itself is a callable the role runner
provides, the graphs live in an ``FFNGraphCache``.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import Counter
from collections.abc import Callable

from afd_plugin.connectors.base import AFDConnector, AFDPeerError
from afd_plugin.evidence import format_dual_ubatch
from afd_plugin.graph_policy import make_ffn_graph_key
from afd_plugin.runtime.ffn_graphs import FFNGraphCache
from afd_plugin.runtime.step_payload import dual_ubatch_tokens, live_stages
from afd_plugin.wire import AFDControlPayload, AFDWireError

logger = logging.getLogger("afd_plugin")

_FLAGS = ("is_graph", "is_warmup", "is_profile")


class FFNBranch(str, enum.Enum):
    """How the FFN side runs one step."""

    PROFILE = "profile"
    """Memory profiling: eager, never a graph."""
    WARMUP = "warmup"
    """Eager; nothing kept."""
    CAPTURE = "capture"
    """The attention side records a graph: capture the FFN graphs of the
    step's keys; no data moves."""
    REPLAY = "replay"
    """The attention side replays: move data, replay the captured graphs."""
    EAGER = "eager"


def select_branch(payload: AFDControlPayload, graph_supported: bool) -> FFNBranch:
    """The branch for ``payload``. A profile step never uses a graph; a graph
    step on a backend without FFN graphs is a protocol error."""
    if payload.is_profile:
        return FFNBranch.PROFILE
    if payload.is_graph:
        if not graph_supported:
            raise AFDWireError(
                "the attention side announced a graph step but this FFN backend "
                "runs eager only (graph_policy allows only 'eager' here)"
            )
        return FFNBranch.CAPTURE if payload.is_warmup else FFNBranch.REPLAY
    if payload.is_warmup:
        return FFNBranch.WARMUP
    return FFNBranch.EAGER


def step_graph_keys(payloads: tuple[AFDControlPayload, ...]) -> tuple:
    """Graph keys of the stages of a graph step that move data."""
    live = set(live_stages(payloads))
    return tuple(make_ffn_graph_key(p) for p in payloads if p.stage_key in live)


ServeStep = Callable[[tuple[AFDControlPayload, ...], FFNBranch], None]
OnExit = Callable[[BaseException | None], None]


class FFNDaemon:
    """Serves steps until the attention side leaves or a peer fails."""

    def __init__(
        self,
        connector: AFDConnector,
        serve_step: ServeStep,
        on_exit: OnExit,
        graphs: FFNGraphCache | None = None,
        name: str = "afd-ffn-daemon",
    ) -> None:
        self.connector = connector
        self.serve_step = serve_step
        self.on_exit = on_exit
        self.graphs = graphs
        self.branches: Counter[FFNBranch] = Counter()
        self.steps = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    @property
    def graph_supported(self) -> bool:
        return self.graphs is not None

    def receive_step(self) -> tuple[AFDControlPayload, ...]:
        """The payloads of the next step, one per stage, each applied to the
        connector state as it arrives (before any compute or capture)."""
        control_plane = self.connector.control_plane
        if control_plane is None:
            # AFD-I2: without a control plane the connector drives; no such
            # connector exists for this runtime yet.
            raise NotImplementedError(
                f"{type(self.connector).__name__} has no control plane; the "
                "connector-driven FFN loop is not implemented for this backend"
            )
        spec = self.connector.spec
        stages = spec.stages if spec is not None else 1
        payloads: list[AFDControlPayload] = []
        for stage in range(stages):
            payload = control_plane.recv_dp_metadata_list()
            if payload.stage_key != stage:
                raise AFDWireError(
                    f"expected the control payload of stage {stage} (of {stages} "
                    f"per step), got stage {payload.stage_key}: {payload}"
                )
            if payloads and any(
                getattr(payload, f) != getattr(payloads[0], f) for f in _FLAGS
            ):
                raise AFDWireError(
                    f"the stages of one step disagree on the step kind: "
                    f"{payloads[0]} then {payload}"
                )
            # AFD-I10: state first, before any compute or graph capture.
            self.connector.update_state_from_dp_metadata(payload)
            payloads.append(payload)
        return tuple(payloads)

    def run_once(self) -> FFNBranch:
        """Serve exactly one step (the loop body; callable from tests)."""
        payloads = self.receive_step()
        branch = select_branch(payloads[0], self.graph_supported)
        if branch is FFNBranch.REPLAY:
            assert self.graphs is not None
            # Replay only what was captured; name the key otherwise.
            self.graphs.require(step_graph_keys(payloads))
        self.serve_step(payloads, branch)
        self.branches[branch] += 1
        self.steps += 1
        tokens = dual_ubatch_tokens(payloads)
        if tokens is not None:
            logger.info(
                "%s", format_dual_ubatch("ffn", self.connector.rank, self.steps, tokens)
            )
        return branch

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 0.0) -> None:
        """Ask the loop to end. A loop blocked waiting for an idle peer cannot be
        interrupted (gloo offers no cancel); it ends with the process."""
        self._stopping.set()
        if timeout and self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        logger.info("afd-plugin: FFN daemon serving")
        error: BaseException | None = None
        try:
            while not self._stopping.is_set():
                self.run_once()
        except AFDPeerError as exc:
            if self._stopping.is_set() or self.connector.peers_left():
                logger.info(
                    "afd-plugin: the attention ranks closed the AFD connection; "
                    "FFN daemon stops after %d steps",
                    sum(self.branches.values()),
                )
            else:
                error = exc
                logger.error("afd-plugin: FFN daemon stops: %s", exc)
        except BaseException as exc:  # any failure ends serving, loudly
            error = exc
            logger.exception("afd-plugin: FFN daemon failed")
        self.error = error
        if not self._stopping.is_set():
            self.on_exit(error)
