# SPDX-License-Identifier: Apache-2.0
"""FFN failover: concurrent streams generate while the active FFN server is
SIGKILLed, the check's injected fault, ``kills`` times in turn.

``expect: complete``: after each kill the attention ranks promote a standby
(its ``/metrics`` shows ``afd:standby_promotions_total`` >= 1, the attention
server's ``afd:ffn_failovers_total`` rises), which becomes the active server
the next kill hits; every stream finishes with the colocated run's greedy
tokens. ``expect: fail``: the last kill finds no standby, and every stream
must end with an error within ``peer_timeout_s`` (plus a margin) of it; the
attention servers dying after it is the expected consequence.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from afd_e2e.checks.failover_streams import Streams
from afd_e2e.checks.metrics import metric_sum, scrape
from afd_e2e.checks.parity import PROMPTS
from afd_e2e.define.scenario import FfnFailoverCheck

FAILOVERS = "afd:ffn_failovers_total"
PROMOTIONS = "afd:standby_promotions_total"
FAILOVER_LINE = re.compile(r"afd-plugin: failover:.*\bin (\d+(?:\.\d+)?) s\b")
"""The attention server's line per failover; the group is its seconds."""
MARGIN_S = 30.0
"""Added to ``peer_timeout_s``: how long a failover, or the failure after the
last kill, may take."""
POLL_S = 0.05


class FaultInjector(Protocol):
    """What the check needs of the engine running the servers."""

    def kill_process(self, name: str) -> object:
        """SIGKILL one server's processes, recorded as an injected fault."""

    def expect_exit(self, name: str) -> None:
        """That server may now exit without failing the run."""


@dataclass(frozen=True)
class FfnServer:
    """One FFN server the check may kill: ``ffn-0`` or a standby."""

    name: str
    """The process name, ``role:rank``."""
    base_url: str

    @property
    def label(self) -> str:
        return self.name.replace(":", "-")


@dataclass(frozen=True)
class FailoverTarget:
    """The deployment as the check sees it."""

    api_url: str
    model: str
    ffn: Sequence[FfnServer]
    """The first FFN server (active at first), then the standbys in order."""
    attention: Sequence[str]
    """The attention servers' process names."""
    attention_logs: Sequence[Path]
    """Where they log their failover lines."""
    peer_timeout_s: float


@dataclass
class FailoverOutcome:
    passed: bool
    message: str
    figures: dict[str, Any] = field(default_factory=dict)


def _counter(base_url: str, name: str) -> float:
    """A counter of one server, 0 while it exports none (or does not answer)."""
    try:
        return metric_sum(scrape(base_url, 5.0), name)
    except (OSError, KeyError, ValueError):
        return 0.0


def _await_promotion(
    target: FailoverTarget, waiting: Sequence[FfnServer], before: float, s: float
) -> FfnServer | None:
    """The standby promoted after a kill: it says so on its ``/metrics`` (so
    it is alive) once the attention server counted a failover; None after
    ``s`` seconds."""
    deadline = time.monotonic() + s
    while time.monotonic() < deadline:
        if _counter(target.api_url, FAILOVERS) > before:
            for server in waiting:
                if _counter(server.base_url, PROMOTIONS) >= 1:
                    return server
        time.sleep(POLL_S * 4)
    return None


def failover_seconds(logs: Sequence[Path], offsets: dict[Path, int]) -> list[float]:
    """Seconds of each failover line the attention servers logged after
    ``offsets`` (their sizes before a kill), in order."""
    out = []
    for log in logs:
        try:
            with log.open("rb") as handle:
                handle.seek(offsets.get(log, 0))
                text = handle.read().decode(errors="replace")
        except OSError:
            continue
        out += [float(m.group(1)) for m in FAILOVER_LINE.finditer(text)]
    return out


def _sizes(logs: Sequence[Path]) -> dict[Path, int]:
    return {log: log.stat().st_size if log.exists() else 0 for log in logs}


def run_ffn_failover(
    target: FailoverTarget,
    spec: FfnFailoverCheck,
    injector: FaultInjector,
    reference: Callable[[list[str], int], list[list[int]]] | None,
    timeout_s: float = 600.0,
) -> FailoverOutcome:
    """Start the streams, kill the active FFN server ``spec.kills`` times
    (each once every stream has received a token since the last failover),
    then judge the streams as ``spec.expect`` says."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(spec.concurrency)]
    streams = Streams(target.api_url, target.model, prompts, spec.max_tokens, timeout_s)
    bound_s = target.peer_timeout_s + MARGIN_S
    killed: list[str] = []
    figures: dict[str, Any] = {"concurrency": spec.concurrency, "killed": killed}

    def failed(message: str) -> FailoverOutcome:
        _count(streams, figures)
        return FailoverOutcome(False, f"FAIL ffn_failover: {message}", figures)

    active, waiting = target.ffn[0], list(target.ffn[1:])
    marks = _sizes(target.attention_logs)
    streams.start()
    since = [0] * len(prompts)
    for k in range(1, spec.kills + 1):
        mid = streams.wait_until(
            lambda got, since=since: all(
                g > s for g, s in zip(got, since, strict=True)
            ),
            timeout_s,
            POLL_S,
        )
        if not mid:
            return failed(
                f"kill {k} cannot land mid-generation: {len(streams.ends())} of "
                f"{len(prompts)} streams ended first (raise max_tokens, now "
                f"{spec.max_tokens})"
            )
        last_without_standby = k == spec.kills and spec.expect == "fail"
        if last_without_standby:
            for name in target.attention:
                injector.expect_exit(name)
        before = _counter(target.api_url, FAILOVERS)
        killed_at = time.monotonic()
        injector.kill_process(active.name)
        killed.append(active.label)
        if last_without_standby:
            return _judge_failure(streams, killed_at, bound_s, figures, marks, target)
        promoted = _await_promotion(target, waiting, before, bound_s)
        if promoted is None:
            return failed(
                f"no standby was promoted within {bound_s:g} s of killing "
                f"{active.label} (kill {k})"
            )
        figures.setdefault("promoted", []).append(promoted.label)
        waiting.remove(promoted)
        active, since = promoted, streams.received()
    streams.join(timeout_s)
    figures["failover_s"] = failover_seconds(target.attention_logs, marks)
    _count(streams, figures)
    if figures["failed"]:
        first = next(e for e in streams.ends().values() if not e.completed)
        return failed(
            f"{figures['failed']} stream(s) did not complete: {first.describe()}"
        )
    if reference is None:
        return failed("no colocated baseline in the plan to compare the streams with")
    distinct = sorted(set(prompts), key=prompts.index)
    expected = dict(zip(distinct, reference(distinct, spec.max_tokens), strict=True))
    ends = streams.ends()
    differ = [
        i
        for i, prompt in enumerate(prompts)
        if ends[i].outcome is None
        or list(ends[i].outcome.token_ids) != expected[prompt]
    ]
    figures["mismatched_streams"] = len(differ)
    if differ:
        return failed(
            f"{len(differ)}/{len(prompts)} streams' tokens differ from the "
            f"colocated run's; first: stream {differ[0]}"
        )
    times = ", ".join(f"{s:.2f} s" for s in figures["failover_s"]) or "not logged"
    return FailoverOutcome(
        True,
        f"PASS ffn_failover {len(prompts)} streams completed across "
        f"{len(killed)} kill(s) ({', '.join(killed)}; failover {times}); tokens "
        "equal to the colocated run",
        figures,
    )


def _count(streams: Streams, figures: dict[str, Any]) -> None:
    ends = streams.ends()
    figures["completed"] = sum(1 for e in ends.values() if e.completed)
    figures["failed"] = len(streams.prompts) - figures["completed"]


def _judge_failure(
    streams: Streams,
    killed_at: float,
    bound_s: float,
    figures: dict[str, Any],
    marks: dict[Path, int],
    target: FailoverTarget,
) -> FailoverOutcome:
    """After the kill with no standby left: every stream must end with an
    error (or a dropped connection) within ``bound_s``."""
    all_ended = streams.join(bound_s)
    ends = streams.ends()
    figures["failover_s"] = failover_seconds(target.attention_logs, marks)
    _count(streams, figures)
    figures["peer_timeout_s"] = target.peer_timeout_s
    if ends:
        figures["time_to_failure_s"] = round(
            max(e.at for e in ends.values()) - killed_at, 2
        )
    if not all_ended:
        return FailoverOutcome(
            False,
            f"FAIL ffn_failover: {len(streams.prompts) - len(ends)} stream(s) still "
            f"open {bound_s:g} s after the last kill ({figures['killed'][-1]}, no "
            "standby left); they must fail within peer_timeout_s",
            figures,
        )
    if figures["completed"]:
        return FailoverOutcome(
            False,
            f"FAIL ffn_failover: {figures['completed']} stream(s) completed after "
            f"the last kill ({figures['killed'][-1]}) although no standby was left",
            figures,
        )
    return FailoverOutcome(
        True,
        f"PASS ffn_failover {len(streams.prompts)} streams failed "
        f"{figures['time_to_failure_s']} s after the last kill "
        f"({figures['killed'][-1]}, no standby left; peer_timeout_s "
        f"{target.peer_timeout_s:g})",
        figures,
    )
