"""The FFN role's daemon: receive each step's control payload, update the
connector, pick the branch (profile / warm-up / eager / graph), serve the step.

Platform-neutral; the step itself is a callable the role runner provides.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import Counter
from collections.abc import Callable

from afd_plugin.connectors.base import AFDConnector, AFDPeerError
from afd_plugin.wire import AFDControlPayload, AFDWireError

logger = logging.getLogger("afd_plugin")


class FFNBranch(str, enum.Enum):
    """How the FFN side runs one step."""

    PROFILE = "profile"
    WARMUP = "warmup"
    EAGER = "eager"
    GRAPH = "graph"


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
        return FFNBranch.GRAPH
    if payload.is_warmup:
        return FFNBranch.WARMUP
    return FFNBranch.EAGER


ServeStep = Callable[[AFDControlPayload, FFNBranch], None]
OnExit = Callable[[BaseException | None], None]


class FFNDaemon:
    """Serves steps until the attention side leaves or a peer fails."""

    def __init__(
        self,
        connector: AFDConnector,
        serve_step: ServeStep,
        on_exit: OnExit,
        graph_supported: bool = False,
        name: str = "afd-ffn-daemon",
    ) -> None:
        self.connector = connector
        self.serve_step = serve_step
        self.on_exit = on_exit
        self.graph_supported = graph_supported
        self.branches: Counter[FFNBranch] = Counter()
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def run_once(self) -> FFNBranch:
        """Serve exactly one step (the loop body; callable from tests)."""
        control_plane = self.connector.control_plane
        if control_plane is None:
            # AFD-I2: without a control plane the connector drives; no such
            # connector exists for this runtime yet.
            raise NotImplementedError(
                f"{type(self.connector).__name__} has no control plane; the "
                "connector-driven FFN loop is not implemented for this backend"
            )
        payload = control_plane.recv_dp_metadata_list()
        # AFD-I10: state first, before any compute or graph capture.
        self.connector.update_state_from_dp_metadata(payload)
        branch = select_branch(payload, self.graph_supported)
        self.serve_step(payload, branch)
        self.branches[branch] += 1
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
