# SPDX-License-Identifier: Apache-2.0
"""Results of one run: the outcome rule, results.json, JUnit XML, terminal summary.

Exit codes: interrupted 130 > teardown failed 3 > check failed 1 > passed 0.
"""

from __future__ import annotations

import datetime
import enum
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from afd_e2e.processes.teardown_record import TeardownRecord

RESULTS_SCHEMA = 1
BAD_INPUT_EXIT = 2
"""Exit code for bad input (an invalid scenario); no run happened."""


class Outcome(enum.Enum):
    """How a run ended; :attr:`exit_code` is what ``afd-e2e run`` returns."""

    PASSED = "passed"
    CHECK_FAILED = "check-failed"
    TEARDOWN_FAILED = "teardown-failed"
    INTERRUPTED = "interrupted"

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]

    @classmethod
    def decide(
        cls, *, interrupted: bool, teardown_ok: bool, checks_ok: bool
    ) -> Outcome:
        """Precedence: interrupted > teardown failed > check failed > passed."""
        if interrupted:
            return cls.INTERRUPTED
        if not teardown_ok:
            return cls.TEARDOWN_FAILED
        if not checks_ok:
            return cls.CHECK_FAILED
        return cls.PASSED


_EXIT_CODES = {
    Outcome.PASSED: 0,
    Outcome.CHECK_FAILED: 1,
    Outcome.TEARDOWN_FAILED: 3,
    Outcome.INTERRUPTED: 130,
}


@dataclass
class CheckResult:
    """One check's verdict and the figures behind it."""

    name: str
    passed: bool
    message: str = ""
    """Why it failed (or a one-line summary when it passed)."""
    figures: dict[str, Any] = field(default_factory=dict)
    """Measured numbers, e.g. ``{"accuracy": 0.62, "threshold": 0.5}``."""
    duration_s: float = 0.0


@dataclass
class Timings:
    """Phase durations in seconds; None for a phase the run never reached."""

    started_at: float
    """Wall-clock start, seconds since the epoch."""
    start_s: float | None = None
    """Launching every role process."""
    ready_s: float | None = None
    """From the last launch until every role was ready."""
    checks_s: float | None = None
    teardown_s: float | None = None
    roles_ready_s: dict[str, float] = field(default_factory=dict)
    """``role:rank`` -> seconds from its launch to ready."""


@dataclass
class RunReport:
    """Everything ``results.json``, the JUnit file and the summary show."""

    scenario_id: str
    run_id: str
    config: Mapping[str, Any]
    """The resolved scenario, as the run used it."""
    timings: Timings
    commands: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``role:rank`` -> argv, extra env, log ... (``ProcessManager.commands()``)."""
    checks: list[CheckResult] = field(default_factory=list)
    teardown: TeardownRecord | None = None
    interrupted_by: str | None = None
    """Signal name (``SIGINT``) when a signal interrupted the run."""
    error: str | None = None
    """Why the run stopped before or between its checks (start-up failure...)."""

    @property
    def checks_ok(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)

    @property
    def teardown_ok(self) -> bool:
        return self.teardown is not None and self.teardown.ok

    @property
    def outcome(self) -> Outcome:
        return Outcome.decide(
            interrupted=self.interrupted_by is not None,
            teardown_ok=self.teardown_ok,
            checks_ok=self.checks_ok,
        )

    def to_dict(self) -> dict[str, Any]:
        outcome = self.outcome
        timings = self.timings
        return {
            "schema": RESULTS_SCHEMA,
            "scenario": self.scenario_id,
            "run_id": self.run_id,
            "outcome": outcome.value,
            "exit_code": outcome.exit_code,
            "interrupted_by": self.interrupted_by,
            "error": self.error,
            "config": dict(self.config),
            "commands": {name: dict(cmd) for name, cmd in self.commands.items()},
            "timings": {
                "started_at": _iso(timings.started_at),
                "start_s": timings.start_s,
                "ready_s": timings.ready_s,
                "checks_s": timings.checks_s,
                "teardown_s": timings.teardown_s,
                "roles_ready_s": dict(timings.roles_ready_s),
            },
            "checks": [
                {
                    "name": c.name,
                    "passed": c.passed,
                    "message": c.message,
                    "figures": dict(c.figures),
                    "duration_s": c.duration_s,
                }
                for c in self.checks
            ],
            "teardown": None if self.teardown is None else self.teardown.to_dict(),
        }


def _iso(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")


def write_results_json(report: RunReport, path: Path) -> None:
    """Write ``results.json`` (atomically: a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    tmp.replace(path)


def _teardown_text(record: TeardownRecord | None) -> str:
    if record is None:
        return "teardown did not run"
    return "\n".join(record.problems())


def write_junit(report: RunReport, path: Path) -> None:
    """JUnit XML: one testcase per check and one for teardown (plus ``run``
    when the run was interrupted or stopped early)."""
    classname = f"afd-e2e.{report.scenario_id}"
    cases: list[ET.Element] = []

    def case(name: str, seconds: float | None) -> ET.Element:
        element = ET.Element(
            "testcase", classname=classname, name=name, time=f"{seconds or 0.0:.3f}"
        )
        cases.append(element)
        return element

    if report.interrupted_by or report.error:
        run = case("run", None)
        if report.interrupted_by:
            ET.SubElement(
                run, "error", message=f"interrupted by {report.interrupted_by}"
            ).text = report.error or ""
        else:
            first = (report.error or "").splitlines()[0] if report.error else ""
            ET.SubElement(run, "failure", message=first).text = report.error
    for check in report.checks:
        element = case(check.name, check.duration_s)
        figures = json.dumps(check.figures, sort_keys=True, default=str)
        if check.passed:
            ET.SubElement(element, "system-out").text = figures
        else:
            failure = ET.SubElement(element, "failure", message=check.message)
            failure.text = f"{check.message}\nfigures: {figures}"
    teardown = case("teardown", report.timings.teardown_s)
    if not report.teardown_ok:
        text = _teardown_text(report.teardown)
        ET.SubElement(teardown, "failure", message=text.splitlines()[0]).text = text
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    total = sum(float(c.get("time", "0")) for c in cases)
    suite = ET.Element(
        "testsuite",
        name=classname,
        tests=str(len(cases)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        time=f"{total:.3f}",
        timestamp=_iso(report.timings.started_at),
    )
    suite.extend(cases)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _figures(figures: Mapping[str, Any]) -> str:
    parts = [
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in figures.items()
    ]
    return " ".join(parts)


def _check_detail(check: CheckResult) -> str:
    """What a summary shows of one check: its figures, or why it failed."""
    return check.message if not check.passed else _figures(check.figures)


def _teardown_detail(record: TeardownRecord) -> str:
    """How the teardown went: the SIGTERMed processes, or its problems."""
    if record.ok:
        return f"{len(record.terminated)} process(es) stopped by SIGTERM"
    return "; ".join(record.problems())


def summary_table(report: RunReport) -> str:
    """A short table for the terminal, ending with the outcome and exit code."""
    rows: list[tuple[str, str, str, str]] = [
        (
            check.name,
            "PASS" if check.passed else "FAIL",
            f"{check.duration_s:.1f}s",
            _check_detail(check),
        )
        for check in report.checks
    ]
    record = report.teardown
    if record is None:
        rows.append(("teardown", "FAIL", "-", "did not run"))
    else:
        detail = _teardown_detail(record)
        if record.marker_killed:
            detail += f"; {len(record.marker_killed)} FFN SIGKILLed by marker scan"
        if record.injected:
            detail += f"; {len(record.injected)} SIGKILLed by a check (injected fault)"
        if record.ok and record.role_exit_s:
            slowest = max(record.role_exit_s.items(), key=lambda kv: kv[1])
            detail += f"; slowest {slowest[0]} {slowest[1]:.1f}s"
            if record.budget_s is not None:
                detail += f" (budget {record.budget_s:g}s)"
        rows.append(
            (
                "teardown",
                "PASS" if record.ok else "FAIL",
                f"{record.duration_s:.1f}s",
                detail,
            )
        )
    header = ("CHECK", "RESULT", "TIME", "DETAIL")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = [f"afd-e2e run {report.scenario_id} ({report.run_id})"]
    if report.error:
        # The first line says why; the rest (the failing role's log tail) is
        # what a user needs to see where it failed, so it is kept verbatim.
        first, *detail = report.error.splitlines()
        lines.append(f"stopped early: {first}")
        lines.extend(detail)
    if report.interrupted_by:
        lines.append(f"interrupted by {report.interrupted_by}")
    for row in [header, *rows]:
        cells = [row[i].ljust(widths[i]) for i in range(3)]
        lines.append("  ".join([*cells, _clip(row[3])]).rstrip())
    outcome = report.outcome
    lines.append(f"outcome: {outcome.value} (exit {outcome.exit_code})")
    return "\n".join(lines)


def summary_markdown(report: RunReport) -> str:
    """The run as Markdown (``summary.md``): the outcome, every check with its
    result and figures, the teardown, the start-up and check times. A CI step
    posts it as its annotation (``afd-e2e ci render``)."""
    outcome = report.outcome
    mark = "passed" if outcome is Outcome.PASSED else outcome.value.upper()
    lines = [
        f"### afd-e2e run `{report.scenario_id}`: {mark} (exit {outcome.exit_code})",
        "",
        f"Run `{report.run_id}`.",
    ]
    if report.error:
        lines += ["", f"Stopped early: {_md(report.error.splitlines()[0])}"]
    if report.interrupted_by:
        lines += ["", f"Interrupted by {report.interrupted_by}."]
    lines += ["", "| check | result | time | detail |", "| --- | --- | --- | --- |"]
    for check in report.checks:
        result = "PASS" if check.passed else "**FAIL**"
        detail = _md(_check_detail(check))
        seconds = f"{check.duration_s:.1f} s"
        lines.append(f"| {check.name} | {result} | {seconds} | {detail} |")
    record = report.teardown
    if record is None:
        lines.append("| teardown | **FAIL** | - | did not run |")
    else:
        result = "PASS" if record.ok else "**FAIL**"
        detail = _teardown_detail(record)
        if record.role_exit_s:
            slowest = ", ".join(
                f"{name} {seconds:.1f} s"
                for name, seconds in sorted(record.role_exit_s.items())
            )
            detail += f"; SIGTERM to gone: {slowest}"
        if record.budget_s is not None:
            detail += f" (budget {record.budget_s:g} s)"
        if record.injected:
            named = sorted({p.name for p in record.injected})
            detail += f"; injected SIGKILL (a check's fault): {', '.join(named)}"
        lines.append(
            f"| teardown | {result} | {record.duration_s:.1f} s | {_md(detail)} |"
        )
    t = report.timings
    times = (
        f"Ready after {_secs(t.ready_s)}, checks {_secs(t.checks_s)}, teardown "
        f"{_secs(t.teardown_s)}. Artifacts: `results.json` (everything), "
        "`junit.xml`, each role's log."
    )
    lines += ["", times]
    return "\n".join(lines) + "\n"


def _secs(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def _md(text: str) -> str:
    """One table cell: no line breaks, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def write_summary_markdown(report: RunReport, path: Path) -> None:
    path.write_text(summary_markdown(report))


def _clip(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
