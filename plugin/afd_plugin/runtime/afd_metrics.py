# SPDX-License-Identifier: Apache-2.0
"""AFD's metrics on vLLM's ``/metrics``: Prometheus counters in the role's
engine process. vLLM's API server runs its engine in a process of its own
(``VLLM_ENABLE_V1_MULTIPROCESSING=0`` included), so ``/metrics`` shows them
when ``PROMETHEUS_MULTIPROC_DIR`` names a directory of the server's own:
prometheus_client's multiprocess mode, which vLLM takes when it is set.

Fed by each role's step clock (``afd_plugin.step_timing``): every finished
step adds its parts, so ``rate(afd:step_part_seconds_total[1m]) /
rate(afd:steps_total[1m])`` is the mean seconds per step of each part, the
same split ``AFD_STEP_TIMING`` logs. On by default; ``AFD_METRICS=0`` turns
the timing and the counters off.
"""

from __future__ import annotations

import logging
import os

from prometheus_client import Counter

from afd_plugin import envs, step_timing

logger = logging.getLogger("afd_plugin")
_micro_batches: dict[tuple[str, int], Counter] = {}
"""(role, rank) -> its micro-batch counter, once :func:`install` ran."""

STEPS = Counter(
    "afd:steps",
    "Steps this AFD role served (attention: model steps; FFN: steps of the "
    "control plane, or dispatches without one).",
    ["role", "rank"],
)
PART_SECONDS = Counter(
    "afd:step_part_seconds",
    "Seconds of each part of an AFD role's steps (attention: between, runner, "
    "announce, send, wait (for the FFN's output), compute; FFN: control (waiting "
    "for the next step), recv (waiting for a layer's input), compute, send).",
    ["role", "rank", "part"],
)
MICRO_BATCHES = Counter(
    "afd:micro_batches",
    "Micro-batch stages the attention role announced, summed over its model "
    "calls (vLLM's profile and dummy runs included, which afd:steps_total "
    "does not count).",
    ["role", "rank"],
)


def install(role: str, rank: int) -> bool:
    """Feed ``role``'s step clock into the counters (once per process);
    False when ``AFD_METRICS`` is off."""
    if not envs.get("AFD_METRICS"):
        return False
    clock = step_timing.clock(role)
    if clock.sink is not None:
        return True
    labels = {"role": role, "rank": str(rank)}
    steps = STEPS.labels(**labels)
    # Every series exists from the start (at 0), as Prometheus users expect.
    parts = {
        name: PART_SECONDS.labels(part=name, **labels)
        for name in step_timing.PARTS.get(role, ())
    }
    if role == "attention":
        _micro_batches[(role, rank)] = MICRO_BATCHES.labels(**labels)

    def sink(step_parts: dict[str, float]) -> None:
        steps.inc()
        for name, seconds in step_parts.items():
            if seconds > 0:
                counter = parts.get(name)
                if counter is None:
                    counter = parts[name] = PART_SECONDS.labels(part=name, **labels)
                counter.inc(seconds)

    clock.sink = sink
    logger.info(
        "afd-plugin: AFD %s rank %d counts its steps in afd:* metrics (pid %d)",
        role,
        rank,
        os.getpid(),
    )
    return True


def count_micro_batches(role: str, rank: int, stages: int) -> None:
    """Add one step's micro-batch stages (nothing unless :func:`install`
    counted this role; called once per step)."""
    counter = _micro_batches.get((role, rank))
    if counter is not None:
        counter.inc(stages)
