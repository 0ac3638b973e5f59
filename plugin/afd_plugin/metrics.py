# SPDX-License-Identifier: Apache-2.0
"""AFD's counters in a role's engine process, bound for vLLM's ``/metrics``
(the catalog: ``afd_plugin.metrics_catalog``).

vLLM's API server runs its engine in a process of its own and serves
``/metrics`` from its own registry, so the counters travel one of two ways:

- by default, through the server's counter directory
  (``afd_plugin.metrics_file``): this process writes them, the API server's
  stat-logger plugin (``runtime/stat_logger.py``) reads them at each scrape;
- when ``PROMETHEUS_MULTIPROC_DIR`` is set (``--api-server-count`` > 1, or set
  by the user), as prometheus_client multiprocess counters, which vLLM's
  ``/metrics`` then collects from every process.

Fed by each role's step clock (``afd_plugin.step_timing``): every finished
step adds its parts, so ``rate(afd:step_part_seconds_total[1m]) /
rate(afd:steps_total[1m])`` is the mean seconds per step of each part, the
same split ``AFD_STEP_TIMING`` logs. The exchange loops count their failures,
the rendezvous host its refusals. On by default; ``AFD_METRICS=0`` turns the
timing and the counters off.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Protocol

from afd_plugin import envs, metrics_file, step_timing
from afd_plugin.connectors.base import AFDPeerError
from afd_plugin.metrics_catalog import (
    EXCHANGE_FAILURES,
    FAILURE_REASONS,
    FFN_FAILOVERS,
    METRICS,
    MICRO_BATCHES,
    PART_SECONDS,
    RENDEZVOUS_REFUSALS,
    STANDBY_PROMOTIONS,
    STANDBYS_LOST,
    STEPS,
    MetricSpec,
)
from afd_plugin.wire import AFDWireError

logger = logging.getLogger("afd_plugin")


class Backend(Protocol):
    def add(self, name: str, labels: dict[str, str], amount: float) -> None: ...


class PrometheusBackend:
    """prometheus_client counters on its default registry, registered once per
    process (multiprocess mode writes each series to the directory vLLM's
    ``/metrics`` collects)."""

    _counters: dict[str, Any] = {}

    def __init__(self) -> None:
        from prometheus_client import Counter

        if not PrometheusBackend._counters:
            PrometheusBackend._counters = {
                spec.name: Counter(spec.name, spec.help, list(spec.labels))
                for spec in METRICS
            }

    def add(self, name: str, labels: dict[str, str], amount: float) -> None:
        self._counters[name].labels(**labels).inc(amount)


_backend: Backend | None = None
_backend_lock = threading.Lock()
_installed: dict[tuple[str, int], tuple[Backend, dict[str, str]]] = {}
"""(role, rank) -> its counters and labels, once :func:`install` fed them."""
EXCHANGE_ERRORS = (AFDPeerError, AFDWireError, TimeoutError, ConnectionError)
"""What a failed exchange raises (anything else is no exchange failure)."""


def backend() -> Backend | None:
    """This process's counters (created on first use); None when
    ``AFD_METRICS`` is off."""
    global _backend
    if not envs.get("AFD_METRICS"):
        return None
    with _backend_lock:
        if _backend is None:
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                _backend = PrometheusBackend()
            else:
                _backend = metrics_file.CounterFile(metrics_file.claim_directory())
        return _backend


def _add(spec: MetricSpec, labels: dict[str, str], amount: float = 1.0) -> None:
    counters = backend()
    if counters is not None:
        counters.add(spec.name, labels, amount)


def install(role: str, rank: int) -> bool:
    """Feed ``role``'s step clock into the counters (once per process);
    False when ``AFD_METRICS`` is off."""
    counters = backend()
    if counters is None:
        return False
    clock = step_timing.clock(role)
    if clock.sink is not None:
        return True
    labels = {"role": role, "rank": str(rank)}
    # Every series exists from the start (at 0), as Prometheus users expect.
    counters.add(STEPS.name, labels, 0.0)
    for name in step_timing.PARTS.get(role, ()):
        counters.add(PART_SECONDS.name, {**labels, "part": name}, 0.0)
    if role == "attention":
        counters.add(MICRO_BATCHES.name, labels, 0.0)
    for reason in FAILURE_REASONS:
        counters.add(EXCHANGE_FAILURES.name, {**labels, "reason": reason}, 0.0)
    part_labels = {name: {**labels, "part": name} for name in step_timing.PARTS[role]}

    def sink(step_parts: dict[str, float]) -> None:
        counters.add(STEPS.name, labels, 1.0)
        for name, seconds in step_parts.items():
            if seconds > 0:
                part = part_labels.get(name) or {**labels, "part": name}
                counters.add(PART_SECONDS.name, part, seconds)

    clock.sink = sink
    _installed[(role, rank)] = (counters, labels)
    logger.info(
        "afd-plugin: AFD %s rank %d counts its steps in afd:* metrics (pid %d, %s)",
        role,
        rank,
        os.getpid(),
        type(counters).__name__,
    )
    return True


def count_micro_batches(role: str, rank: int, stages: int) -> None:
    """Add one step's micro-batch stages (nothing unless :func:`install`
    counted this role; called once per step, so no setting is read here)."""
    installed = _installed.get((role, rank))
    if installed is not None:
        counters, labels = installed
        counters.add(MICRO_BATCHES.name, labels, stages)


def failure_reason(exc: BaseException) -> str:
    """The ``reason`` label of an exchange that ended with ``exc``."""
    if isinstance(exc, AFDWireError):
        return "wire"
    if isinstance(exc, EXCHANGE_ERRORS):
        return "peer"
    return "error"


def count_failure(role: str, rank: int, exc: BaseException) -> None:
    """Count one failed exchange that ends ``role``'s serving."""
    labels = {"role": role, "rank": str(rank), "reason": failure_reason(exc)}
    _add(EXCHANGE_FAILURES, labels)


def count_refusal(reason: str, amount: float = 1.0) -> None:
    """Count one join the rendezvous this process hosts refused (``amount``
    0: the series starts, when the rendezvous opens)."""
    _add(RENDEZVOUS_REFUSALS, {"reason": reason}, amount)


def count_failover(rank: int) -> None:
    """Count one failover of attention rank ``rank`` to a standby FFN server."""
    _add(FFN_FAILOVERS, {"role": "attention", "rank": str(rank)})


def count_promotion(rank: int) -> None:
    """Count this standby FFN server's promotion (it now serves ``rank``)."""
    _add(STANDBY_PROMOTIONS, {"role": "ffn", "rank": str(rank)})


def count_standby_lost(amount: float = 1.0) -> None:
    """Count one standby lost while waiting (``amount`` 0: the series starts,
    when a rendezvous with standby places opens)."""
    _add(STANDBYS_LOST, {"role": "attention", "rank": "0"}, amount)
