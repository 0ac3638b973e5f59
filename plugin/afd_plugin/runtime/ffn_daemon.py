# SPDX-License-Identifier: Apache-2.0
"""The FFN role's daemon: receive each step's control payloads (one per
micro-batch stage), update the connector, serve the step by its kind (profile /
warm-up / capture / replay / eager). Without a control plane (AFD-I2) the
connector drives: each dispatch, from any attention rank in arrival order,
says its layer, and the daemon serves it eagerly (no graph cache: its key
needs the DP metadata that no one announces).

Platform-neutral and pure; the step itself is a callable the role runner
provides, the graphs live in an ``FFNGraphCache``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable

from afd_plugin import metrics as afd_metrics
from afd_plugin import step_timing
from afd_plugin.connectors.base import AFDConnector, AFDPeerError, DispatchWork
from afd_plugin.evidence import format_dual_ubatch
from afd_plugin.graph_policy import make_ffn_graph_key
from afd_plugin.runtime.ffn_graphs import FFNGraphCache
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import dual_ubatch_tokens, live_stages
from afd_plugin.wire import AFDControlPayload, AFDWireError

logger = logging.getLogger("afd_plugin")
_CLOCK = step_timing.clock("ffn")


def serving_kind(payload: AFDControlPayload, graph_supported: bool) -> StepKind:
    """How the FFN side serves ``payload``: its step kind. A graph step on a
    backend without FFN graphs is a protocol error."""
    kind = payload.kind
    if kind.is_graph and not graph_supported:
        raise AFDWireError(
            f"the attention side announced a {kind.value} (graph) step but this "
            "FFN backend runs eager only (graph_policy allows only 'eager' here)"
        )
    return kind


def step_graph_keys(payloads: tuple[AFDControlPayload, ...]) -> tuple:
    """Graph keys of the stages of a graph step that move data."""
    live = set(live_stages(payloads))
    return tuple(make_ffn_graph_key(p) for p in payloads if p.stage_key in live)


ServeStep = Callable[[tuple[AFDControlPayload, ...], StepKind], None]
ServeDispatch = Callable[[DispatchWork], None]
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
        serve_dispatch: ServeDispatch | None = None,
    ) -> None:
        if connector.control_plane is None and graphs is not None:
            raise RuntimeError(
                f"{type(connector).__name__} has no control plane, so its FFN side "
                "runs eager only (AFD-I2): no FFN graph cache"
            )
        self.connector = connector
        self.serve_step = serve_step
        self.serve_dispatch = serve_dispatch
        self.on_exit = on_exit
        self.graphs = graphs
        self.kinds: Counter[StepKind] = Counter()
        self.steps = 0
        self.dispatches: Counter[tuple[int, int]] = Counter()
        """Connector-driven: dispatches served per (source rank, stage)."""
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
            raise RuntimeError(
                f"{type(self.connector).__name__} has no control plane: no step "
                "payloads to receive (the daemon serves its dispatches)"
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
            if payloads and payload.kind is not payloads[0].kind:
                raise AFDWireError(
                    f"the stages of one step disagree on the step kind: "
                    f"{payloads[0]} then {payload}"
                )
            # AFD-I10: state first, before any compute or graph capture.
            self.connector.update_state_from_dp_metadata(payload)
            payloads.append(payload)
        return tuple(payloads)

    def run_once(self) -> StepKind:
        """Serve exactly one step, or one dispatch without a control plane (the
        loop body; callable from tests)."""
        # AFD-I2: the only branch between the two drivers.
        if self.connector.control_plane is None:
            return self._serve_one_dispatch()
        _CLOCK.step()
        with _CLOCK.part("control"):
            payloads = self.receive_step()
        kind = serving_kind(payloads[0], self.graph_supported)
        if kind is StepKind.REPLAY:
            assert self.graphs is not None
            # Replay only what was captured; name the key otherwise.
            self.graphs.require(step_graph_keys(payloads))
        self.serve_step(payloads, kind)
        self.kinds[kind] += 1
        self.steps += 1
        tokens = dual_ubatch_tokens(payloads)
        if tokens is not None:
            logger.info(
                "%s", format_dual_ubatch("ffn", self.connector.rank, self.steps, tokens)
            )
        return kind

    def _serve_one_dispatch(self) -> StepKind:
        if self.serve_dispatch is None:
            raise NotImplementedError(
                f"{type(self.connector).__name__} has no control plane, and this "
                "FFN runner serves no dispatches (the connector-driven path)"
            )
        _CLOCK.step()
        with _CLOCK.part("recv"):
            work = self.connector.recv_dispatch()
        self.serve_dispatch(work)
        key = (work.source, work.stage)
        if key not in self.dispatches:
            logger.info(
                "afd-plugin: FFN rank %d served its first dispatch from attention "
                "rank %d, stage %d (layer %d, %d tokens, %d routed rows)",
                self.connector.rank,
                work.source,
                work.stage,
                work.layer,
                work.hidden.shape[0],
                work.routed.shape[0],
            )
        self.dispatches[key] += 1
        self.kinds[StepKind.EAGER] += 1
        self.steps += 1
        return StepKind.EAGER

    def _dispatch_summary(self) -> str:
        if not self.dispatches:
            return ""
        parts = ", ".join(
            f"attention rank {source} stage {stage}: {n}"
            for (source, stage), n in sorted(self.dispatches.items())
        )
        return f" (dispatches served: {parts})"

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
        error: BaseException | None = None
        try:
            if self.connector.waiting_standby:
                logger.info(
                    "afd-plugin: FFN daemon waits until this standby is promoted"
                )
            if not self.connector.wait_until_active(self._stopping.is_set):
                # A standby that was never needed: shutdown, or the deployment
                # (its rendezvous host) ended first.
                if not self._stopping.is_set():
                    self.on_exit(None)
                return
            logger.info(
                "afd-plugin: FFN daemon serving %s",
                "the dispatches of any attention rank in arrival order (no control "
                "plane)"
                if self.connector.control_plane is None
                else "the steps its control plane announces",
            )
            while not self._stopping.is_set():
                self.run_once()
        except AFDPeerError as exc:
            if self._stopping.is_set() or self.connector.peers_left():
                logger.info(
                    "afd-plugin: the attention ranks closed the AFD connection; "
                    "FFN daemon stops after %d steps%s",
                    sum(self.kinds.values()),
                    self._dispatch_summary(),
                )
            else:
                error = exc
                logger.error("afd-plugin: FFN daemon stops: %s", exc)
        except BaseException as exc:  # any failure ends serving, loudly
            error = exc
            logger.exception("afd-plugin: FFN daemon failed")
        if error is not None:
            afd_metrics.count_failure("ffn", self.connector.rank, error)
        self.error = error
        if not self._stopping.is_set():
            self.on_exit(error)
