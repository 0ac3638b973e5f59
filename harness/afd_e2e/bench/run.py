# SPDX-License-Identifier: Apache-2.0
"""Runs ``afd-e2e bench``: the colocated baseline alone, then the AFD roles
alone, each started from the scenario's launch plan, measured at every
concurrency by vLLM's serving benchmark, and torn down under the SIGKILL
policy before the next one starts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from afd_e2e.bench.options import BenchOptions, client_argv
from afd_e2e.bench.report import BenchReport
from afd_e2e.checks.metrics import afd_step_ms, scrape
from afd_e2e.define.scenario import Scenario
from afd_e2e.launch.plan import LaunchPlan, RoleLaunch
from afd_e2e.processes.interrupts import Interrupted, InterruptGuard
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.readiness import Probe, attention_api_probe, health_probe
from afd_e2e.processes.role_errors import RoleError
from afd_e2e.processes.role_logs import tail_lines
from afd_e2e.processes.role_process import ProcessSpec
from afd_plugin.step_timing import overlap

PROGRESS_EVERY_S = 5.0
PHASES: dict[str, tuple[str, ...]] = {
    "colocated": ("baseline",),
    "afd": ("ffn", "attention"),
}

Say = Callable[[str], None]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _client(
    argv: list[str], log: Path, label: str, timeout_s: float, say: Say
) -> str | None:
    """Run one benchmark child; None on success, else why it failed."""
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            while True:
                try:
                    code = child.wait(PROGRESS_EVERY_S)
                    break
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - started
                    if elapsed > timeout_s:
                        child.kill()
                        child.wait()
                        return f"{label}: killed after {timeout_s:g} s (log {log})"
                    say(f"afd-e2e bench: {label}: running, {elapsed:.0f} s")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if code != 0:
        tail = "\n  | ".join(tail_lines(log, 15))
        return f"{label}: the serving benchmark exited with {code}:\n  | {tail}"
    return None


def _probe(plan: LaunchPlan, role: RoleLaunch) -> Probe:
    if role.role == "ffn":
        return health_probe(role.base_url)
    return attention_api_probe(role.base_url, plan.served_name)


def _phase(
    plan: LaunchPlan,
    scenario: Scenario,
    options: BenchOptions,
    deployment: str,
    report: BenchReport,
    say: Say,
) -> None:
    roles = [r for r in plan.roles if r.role in PHASES[deployment]]
    run_dir = plan.run_dir / deployment
    procs = ProcessManager(
        plan.run_id,
        run_dir,
        scenario_id=plan.scenario_id,
        grace_s=scenario.timeouts.teardown_grace_s,
    )
    try:
        for role in roles:
            port = None if role.headless else role.api_port
            spec = ProcessSpec(role.role, role.rank, role.argv, role.env, port=port)
            procs.start(spec)
        procs.wait_ready(
            {f"{r.role}:{r.rank}": _probe(plan, r) for r in roles},
            scenario.timeouts.startup_s,
        )
        api = next(r for r in roles if r.role != "ffn")
        afd_roles = [
            r for r in roles if r.role in ("attention", "ffn") and not r.headless
        ]
        for concurrency in options.concurrency:
            before = _scrape_roles(afd_roles)
            label = f"{deployment} concurrency {concurrency}"
            say(f"afd-e2e bench: {label}: {options.num_prompts} requests")
            out = run_dir / f"serve-c{concurrency}.json"
            argv = client_argv(
                options,
                concurrency,
                base_url=api.base_url,
                served_name=plan.served_name,
                tokenizer=plan.model_path,
                out=out,
            )
            log = run_dir / f"serve-c{concurrency}.log"
            error = _client(argv, log, label, options.timeout_s, say)
            procs.check_alive(f"the {label} benchmark")
            if error is not None:
                report.errors.append(error)
                continue
            result = json.loads(out.read_text(encoding="utf-8"))
            if result.get("failed"):
                report.errors.append(f"{label}: {result['failed']} requests failed")
            report.results[deployment][concurrency] = result
            if before:
                try:
                    means = _step_means(before, _scrape_roles(afd_roles))
                except (ValueError, KeyError, OSError) as exc:
                    say(f"afd-e2e bench: {label}: no overlap figures: {exc}")
                else:
                    report.step_parts_ms[concurrency] = means
                    report.overlap[concurrency] = overlap(
                        means["attention"], means["ffn"]
                    )
    except RoleError as exc:
        report.errors.append(f"{deployment}: {exc}")
    finally:
        record = procs.stop()
        report.teardown[deployment] = record.problems()


def _scrape_roles(roles: list[RoleLaunch]) -> dict[str, str]:
    """The ``/metrics`` of every AFD role server with an API server, joined
    per role (the counters of a role's servers add up)."""
    texts: dict[str, list[str]] = {}
    for r in roles:
        texts.setdefault(r.role, []).append(scrape(r.base_url))
    return {role: "\n".join(t) for role, t in texts.items()}


def _step_means(
    before: dict[str, str], after: dict[str, str]
) -> dict[str, dict[str, float]]:
    """Each role's mean step parts (ms) during one run, from its counters."""
    return {role: afd_step_ms(before[role], after[role], role) for role in after}


def run_bench(
    plan: LaunchPlan,
    scenario: Scenario,
    options: BenchOptions,
    say: Say = _say,
) -> BenchReport:
    """Measure both deployments of ``plan`` (which has a baseline), one after
    the other on the same machine, with the same workload. SIGINT or SIGTERM
    ends the run, and the servers of the phase then running are stopped."""
    report = BenchReport(plan.scenario_id, options, run_id=plan.run_id)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    with InterruptGuard() as guard:
        try:
            for deployment in PHASES:
                _phase(plan, scenario, options, deployment, report, say)
        except Interrupted as exc:
            report.interrupted_by = exc.signame
        report.interrupted_by = report.interrupted_by or guard.signame
    if report.interrupted_by:
        report.errors.append(f"interrupted by {report.interrupted_by}")
    return report
