# SPDX-License-Identifier: Apache-2.0
"""What a run's teardown did: the processes it signalled, killed or found leaked.

Plain data; ``results.json`` carries it and a run fails when it is not ok.
Several teardowns of one run (a server stopped early, the rest at the end)
merge into one record (:func:`merge_records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProcessRecord:
    """One process as the teardown record names it."""

    pid: int
    name: str
    """``role:rank`` it belongs to (``?`` when unknown)."""
    cmdline: tuple[str, ...]
    found_by: str
    """``child`` (spawned), ``tree`` (snapshot descendant), ``group`` or ``marker``."""

    def describe(self) -> str:
        command = " ".join(self.cmdline) or "?"
        if len(command) > 160:
            command = command[:157] + "..."
        return f"pid {self.pid} {self.name} ({self.found_by}): {command}"


@dataclass
class TeardownRecord:
    """What teardown did; it failed when :attr:`ok` is False."""

    grace_s: float
    marker_scan: bool
    duration_s: float = 0.0
    terminated: list[ProcessRecord] = field(default_factory=list)
    """Processes sent SIGTERM (role groups are signalled as well)."""
    escalated: list[ProcessRecord] = field(default_factory=list)
    """Processes alive at the grace deadline, sent SIGKILL: each fails teardown."""
    marker_killed: list[ProcessRecord] = field(default_factory=list)
    """FFN processes SIGKILLed under the marker-scan exception (allowed)."""
    injected: list[ProcessRecord] = field(default_factory=list)
    """Processes a check SIGKILLed on purpose, as the fault it injects (the
    ``ffn_failover`` check's dead FFN server): no teardown signal, allowed;
    every other process must still go on SIGTERM."""
    leaks: list[ProcessRecord] = field(default_factory=list)
    """Processes still carrying the run marker after teardown."""
    errors: list[str] = field(default_factory=list)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    """``role:rank`` -> exit code (negative: killed by that signal)."""
    role_exit_s: dict[str, float] = field(default_factory=dict)
    """``role:rank`` -> seconds from its SIGTERM until its last process was
    gone (a role that needed SIGKILL has none)."""
    budget_s: float | None = None
    """The scenario's teardown budget: a longer teardown fails as a SIGKILL
    does."""

    @property
    def over_budget(self) -> bool:
        return self.budget_s is not None and self.duration_s > self.budget_s

    @property
    def ok(self) -> bool:
        return not (self.escalated or self.leaks or self.errors or self.over_budget)

    def problems(self) -> list[str]:
        """One line per reason the teardown failed."""
        lines = [
            f"needed SIGKILL after {self.grace_s:g} s grace: {p.describe()}"
            for p in self.escalated
        ]
        lines += [f"leaked: {p.describe()}" for p in self.leaks]
        if self.over_budget:
            slowest = sorted(self.role_exit_s.items(), key=lambda kv: -kv[1])[:3]
            named = ", ".join(f"{name} {s:.1f} s" for name, s in slowest)
            lines.append(
                f"teardown took {self.duration_s:.1f} s, over its budget of "
                f"{self.budget_s:g} s (slowest: {named or 'unknown'})"
            )
        return lines + self.errors

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data


def merge_records(records: Sequence[TeardownRecord]) -> TeardownRecord:
    """One record of several teardowns of the same manager, in order."""
    last = records[-1]
    out = TeardownRecord(grace_s=last.grace_s, marker_scan=last.marker_scan)
    for record in records:
        out.duration_s += record.duration_s
        out.terminated += record.terminated
        out.escalated += record.escalated
        out.marker_killed += record.marker_killed
        out.injected += [p for p in record.injected if p not in out.injected]
        out.leaks += [p for p in record.leaks if p not in out.leaks]
        out.errors += record.errors
        out.exit_codes.update(record.exit_codes)
        out.role_exit_s.update(record.role_exit_s)
    return out
