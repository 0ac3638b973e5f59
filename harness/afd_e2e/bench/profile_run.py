# SPDX-License-Identifier: Apache-2.0
"""Runs ``afd-e2e bench ID --profile``: the scenario's AFD roles alone with
``AFD_STEP_TIMING`` on, a steady decode load at each concurrency, the timing
lines each role logged during the load's steady window, and from them the
calibration rows (``bench/profile.py``); ``calibration.csv`` and
``profile.json`` (every raw timing line) land in the run directory.

One window per concurrency: start N long streams, wait until every prefill
is done, let ``SETTLE_LINES`` attention timing lines pass (the window they
cover may hold prefills or idle time), then measure over the next
``windows`` attention lines. The batch is what the server counted over that
window (generated tokens over engine steps), not the concurrency asked for.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from afd_e2e.bench.decode_load import (
    DecodeLoad,
    ServerCounters,
    prompt_ids,
    read_counters,
)
from afd_e2e.bench.profile import (
    CalibrationRow,
    calibration_csv,
    count_lines,
    derive_row,
    mean_parts,
    model_layers,
    row_json,
    row_problems,
    timing_lines,
)
from afd_e2e.bench.profile_options import SETTLE_LINES, ProfileOptions
from afd_e2e.define.scenario import Scenario
from afd_e2e.launch.plan import LaunchPlan, RoleLaunch
from afd_e2e.processes.interrupts import Interrupted, InterruptGuard
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.readiness import Probe, attention_api_probe, health_probe
from afd_e2e.processes.role_errors import RoleError
from afd_e2e.processes.role_process import ProcessSpec
from afd_plugin.step_timing import overlap

TIMING_ENV = "AFD_STEP_TIMING"
POLL_S = 0.05
IDLE_WAIT_S = 60.0
"""How long the server may take to drop the previous window's requests."""

Say = Callable[[str], None]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class ProfileReport:
    """What one ``--profile`` run measured and derived."""

    scenario_id: str
    options: ProfileOptions
    run_id: str = ""
    layers: int = 0
    windows: list[dict[str, Any]] = field(default_factory=list)
    """Per concurrency: the counters, per-step means, raw lines and row."""
    rows: list[CalibrationRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    teardown: list[str] = field(default_factory=list)
    interrupted_by: str | None = None
    """SIGINT or SIGTERM, when one cut the run short (teardown still ran)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario_id,
            "run_id": self.run_id,
            "options": asdict(self.options),
            "settle_lines": SETTLE_LINES,
            "layers": self.layers,
            "rows": [row_json(r) for r in self.rows],
            "windows": self.windows,
            "errors": self.errors,
            "warnings": self.warnings,
            "teardown": self.teardown,
            "interrupted_by": self.interrupted_by,
        }


class _LogTail:
    """Complete lines appended to a role's log since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = self._end()

    def _end(self) -> int:
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        return data.rfind(b"\n") + 1

    def read(self) -> str:
        """The complete lines after ``pos``; moves ``pos`` past them."""
        with self.path.open("rb") as log:
            log.seek(self.pos)
            data = log.read()
        done = data.rfind(b"\n") + 1
        self.pos += done
        return data[:done].decode(errors="replace")

    def take(self, role: str, wanted: int) -> int:
        """Move ``pos`` past complete lines until ``wanted`` timing lines of
        ``role`` are behind it, or past every complete line when fewer have
        come; how many it took. A window holds exactly the lines it asked
        for, however many a slow poll finds waiting."""
        with self.path.open("rb") as log:
            log.seek(self.pos)
            data = log.read()
        taken = 0
        for line in data.splitlines(keepends=True):
            if taken == wanted or not line.endswith(b"\n"):
                break
            self.pos += len(line)
            taken += count_lines(line.decode(errors="replace"), role)
        return taken

    def text(self, start: int, end: int) -> str:
        with self.path.open("rb") as log:
            log.seek(start)
            return log.read(end - start).decode(errors="replace")


class _WindowFailed(Exception):
    pass


def _probe(plan: LaunchPlan, role: RoleLaunch) -> Probe:
    if role.role == "ffn":
        return health_probe(role.base_url)
    return attention_api_probe(role.base_url, plan.served_name)


def _counters(base_url: str) -> ServerCounters:
    try:
        return read_counters(base_url)
    except (OSError, ValueError) as exc:
        raise _WindowFailed(f"reading {base_url}/metrics: {exc}") from None


class _Window:
    """One concurrency's load and measurement."""

    def __init__(
        self,
        procs: ProcessManager,
        api: RoleLaunch,
        tails: dict[str, _LogTail],
        options: ProfileOptions,
        concurrency: int,
    ) -> None:
        self.procs, self.api, self.tails = procs, api, tails
        self.options, self.concurrency = options, concurrency
        self.deadline = time.monotonic() + options.timeout_s

    def _check(self, load: DecodeLoad, what: str) -> None:
        self.procs.check_alive(f"the concurrency {self.concurrency} window")
        problems = load.problems()
        if problems:
            raise _WindowFailed(f"{what}: " + "; ".join(problems))
        if time.monotonic() > self.deadline:
            raise _WindowFailed(
                f"{what}: not done after {self.options.timeout_s:g} s (--timeout-s)"
            )

    def _await_lines(self, load: DecodeLoad, count: int, what: str) -> None:
        tail, seen = self.tails["attention"], 0
        while seen < count:
            seen += tail.take("attention", count - seen)
            self._check(load, what)
            time.sleep(POLL_S)

    def measure(
        self, load: DecodeLoad
    ) -> tuple[dict[str, str], ServerCounters, ServerCounters, list[list[int]]]:
        """Raw text of both roles' logs over the steady window, the server's
        counters at its ends, and the streams' token counts at its ends."""
        while not load.all_decoding():
            self._check(load, "waiting for every prefill")
            time.sleep(POLL_S)
        self.tails["attention"].read()
        self._await_lines(load, SETTLE_LINES, "settling")
        self.tails["ffn"].read()  # its lines so far cover the settling steps
        starts = {role: tail.pos for role, tail in self.tails.items()}
        first = _counters(self.api.base_url)
        tokens = [load.tokens()]
        self._await_lines(load, self.options.windows, "measuring")
        last = _counters(self.api.base_url)
        tokens.append(load.tokens())
        self.tails["ffn"].read()
        self._check(load, "measuring")
        text = {
            role: tail.text(starts[role], tail.pos) for role, tail in self.tails.items()
        }
        return text, first, last, tokens


def _await_idle(base_url: str) -> None:
    deadline = time.monotonic() + IDLE_WAIT_S
    while _counters(base_url).values["running"] > 0:
        if time.monotonic() > deadline:
            raise _WindowFailed(
                f"the server still runs requests {IDLE_WAIT_S:g} s after the "
                "previous window's streams were closed"
            )
        time.sleep(0.2)


def _window_record(
    concurrency: int,
    text: dict[str, str],
    first: ServerCounters,
    last: ServerCounters,
    tokens: list[list[int]],
    options: ProfileOptions,
    layers: int,
) -> tuple[dict[str, Any], CalibrationRow]:
    steps = last.delta(first, "steps")
    generated = last.delta(first, "generation_tokens")
    if steps <= 0:
        raise _WindowFailed(f"concurrency {concurrency}: no engine step counted")
    parsed = {role: timing_lines(t) for role, t in text.items()}
    try:
        means = {role: mean_parts(parsed[role], role) for role in parsed}
    except ValueError as exc:
        raise _WindowFailed(f"concurrency {concurrency}: {exc}") from None
    context = options.input_len + statistics.fmean(
        (a + b) / 2 for a, b in zip(tokens[0], tokens[1], strict=True)
    )
    batch = generated / steps
    row = derive_row(batch, means["attention"], means["ffn"], layers, context)
    record = {
        "concurrency": concurrency,
        "batch": batch,
        "context": context,
        "seconds": last.at - first.at,
        "engine_steps": steps,
        "generated_tokens": generated,
        "prompt_tokens_computed": last.delta(first, "step_tokens") - generated,
        "running": [first.values["running"], last.values["running"]],
        "waiting": [first.values["waiting"], last.values["waiting"]],
        "preemptions": last.delta(first, "preemptions"),
        "per_step_ms": means,
        "overlap": overlap(means["attention"], means["ffn"]),
        "row": row_json(row),
        "timing_lines": {
            role: [ln for ln in t.splitlines() if "AFD_STEP_TIMING" in ln]
            for role, t in text.items()
        },
    }
    return record, row


def _profile_windows(
    plan: LaunchPlan,
    procs: ProcessManager,
    api: RoleLaunch,
    options: ProfileOptions,
    report: ProfileReport,
    say: Say,
    calibrate: bool = True,
) -> None:
    """Measure every concurrency; ``calibrate``: its rows go to the
    calibration (one micro-batch per step only)."""
    config = json.loads((Path(plan.model_path) / "config.json").read_text())
    vocab = int(config["vocab_size"])
    logs = procs.run_dir
    for concurrency in options.concurrency:
        tails = {
            "attention": _LogTail(logs / "attention-0.log"),
            "ffn": _LogTail(logs / "ffn-0.log"),
        }
        say(f"afd-e2e bench --profile: concurrency {concurrency}: streaming")
        prompts = prompt_ids(
            concurrency, options.input_len, vocab, options.seed * 1000 + concurrency
        )
        load = DecodeLoad(api.base_url, plan.served_name, prompts, options.max_tokens)
        try:
            window = _Window(procs, api, tails, options, concurrency)
            measured = window.measure(load)
        except _WindowFailed as exc:
            report.errors.append(f"concurrency {concurrency}: {exc}")
            continue
        finally:
            load.stop()
        try:
            record, row = _window_record(
                concurrency, *measured, options=options, layers=report.layers
            )
            _await_idle(api.base_url)
        except _WindowFailed as exc:
            report.errors.append(str(exc))
            continue
        report.windows.append(record)
        if calibrate:
            problems = row_problems(row, concurrency)
            report.warnings += problems
            if not problems:
                report.rows.append(row)
        fit = record["overlap"]
        say(
            f"afd-e2e bench --profile: concurrency {concurrency}: batch "
            f"{row.batch:.2f}, per layer attention {row.attention_s * 1e6:.0f} us, "
            f"FFN {row.ffn_s * 1e6:.0f} us, exchange {row.exchange_s * 1e6:.0f} us; "
            f"per step {fit['step_ms']:.2f} ms: attention busy "
            f"{fit['attention_busy_ms']:.2f}, waiting for the FFN "
            f"{fit['attention_wait_ms']:.2f}, FFN busy {fit['ffn_busy_ms']:.2f}, "
            f"pipeline efficiency {fit['pipeline_efficiency']:.2f}"
        )


def run_profile(
    plan: LaunchPlan,
    scenario: Scenario,
    options: ProfileOptions,
    say: Say = _say,
) -> ProfileReport:
    """Start the AFD roles of ``plan`` with step timing on, measure every
    concurrency, tear them down (SIGKILL policy)."""
    report = ProfileReport(plan.scenario_id, options, run_id=plan.run_id)
    report.layers = model_layers(plan.model_path)
    roles = [r for r in plan.roles if r.role in ("ffn", "attention")]
    procs = ProcessManager(
        plan.run_id,
        plan.run_dir / "afd",
        scenario_id=plan.scenario_id,
        grace_s=scenario.timeouts.teardown_grace_s,
    )
    timing = {TIMING_ENV: str(options.timing_window)}
    with InterruptGuard() as guard:
        try:
            for role in roles:
                env = {**role.env, **timing}
                port = None if role.headless else role.api_port
                spec = ProcessSpec(role.role, role.rank, role.argv, env, port=port)
                procs.start(spec)
            procs.wait_ready(
                {f"{r.role}:{r.rank}": _probe(plan, r) for r in roles},
                scenario.timeouts.startup_s,
            )
            api = next(r for r in roles if r.role == "attention")
            calibrate = not scenario.dbo.enabled
            if not calibrate:
                report.warnings.append(
                    "two micro-batches per step: the windows report the roles' "
                    "overlap; calibration rows come from one micro-batch per step"
                )
            _profile_windows(plan, procs, api, options, report, say, calibrate)
        except RoleError as exc:
            report.errors.append(f"afd: {exc}")
        except Interrupted as exc:
            report.interrupted_by = exc.signame
        finally:
            report.teardown = procs.stop().problems()
        report.interrupted_by = report.interrupted_by or guard.signame
    if report.interrupted_by:
        report.errors.append(f"interrupted by {report.interrupted_by}")
    return report


def write_outputs(report: ProfileReport, run_dir: Path) -> tuple[Path, Path]:
    """``calibration.csv`` (the rows) and ``profile.json`` (everything)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    csv_path = run_dir / "calibration.csv"
    comments = [
        f"afd-e2e bench {report.scenario_id} --profile, run {report.run_id}",
        (
            f"seconds per decoder layer ({report.layers} layers, config.json) and "
            "micro-batch; derivation: afd_e2e/bench/profile.py"
        ),
    ]
    csv_path.write_text(calibration_csv(report.rows, comments), encoding="utf-8")
    json_path = run_dir / "profile.json"
    json_path.write_text(
        json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8"
    )
    return csv_path, json_path
