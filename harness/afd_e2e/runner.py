# SPDX-License-Identifier: Apache-2.0
"""Executes a launch plan: start every role, wait until they serve, run the
scenario's checks, tear down under the SIGKILL policy and write the results."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from afd_e2e.checks.cancel_recover import run_cancel_recover
from afd_e2e.checks.evidence import check_dual_ubatch, mark_logs
from afd_e2e.checks.ffn_failover import FailoverTarget, FfnServer, run_ffn_failover
from afd_e2e.checks.parity import PROMPTS, ParityError, compare, greedy_tokens
from afd_e2e.define.deployment import afd_config
from afd_e2e.define.scenario import Scenario
from afd_e2e.engines.base import Engine, Servers, server_probe
from afd_e2e.engines.local import LocalEngine
from afd_e2e.launch.plan import LaunchPlan
from afd_e2e.processes.interrupts import Interrupted, InterruptGuard
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.role_errors import RoleError
from afd_e2e.publish.report import (
    CheckResult,
    RunReport,
    Timings,
    summary_table,
    write_junit,
    write_results_json,
    write_summary_markdown,
)


@dataclass(frozen=True)
class RunOptions:
    """How ``execute`` reports and ends; ``afd-e2e run`` builds it from its flags."""

    json: bool = False
    """Print the results as JSON on stdout (the harness's lines stay on stderr)."""
    stream_logs: bool = False
    """Print every server's output on stderr too, each line prefixed
    ``[role:rank]`` (it is always in ``<run_dir>/<role>-<rank>.log``)."""
    keep_running: bool = False
    """After the checks, keep the roles serving until Ctrl-C."""


def _parity(plan: LaunchPlan, scenario: Scenario) -> CheckResult:
    spec = scenario.checks.parity
    assert spec is not None
    baseline = plan.role("baseline")
    start = time.monotonic()
    prompts = list((PROMPTS * (spec.prompts // len(PROMPTS) + 1))[: spec.prompts])
    if baseline is None:
        return CheckResult("parity", False, "no colocated baseline in the plan")
    try:
        reference = greedy_tokens(
            baseline.base_url, plan.served_name, prompts, spec.max_tokens
        )
        afd = greedy_tokens(
            plan.api.base_url, plan.served_name, prompts, spec.max_tokens
        )
    except ParityError as exc:
        return CheckResult(
            "parity", False, str(exc), duration_s=time.monotonic() - start
        )
    outcome = compare(reference, afd)
    return CheckResult(
        "parity",
        outcome.passed,
        outcome.message,
        {
            "prompts": outcome.prompts,
            "tokens": outcome.tokens,
            "mismatched_prompts": outcome.mismatches,
        },
        time.monotonic() - start,
    )


def _gsm8k_data(plan: LaunchPlan, scenario: Scenario) -> Path | None:
    """The real data when given; generated items for CPU scenarios otherwise."""
    from afd_e2e.checks.gsm8k.items import write_items
    from afd_e2e.define.policy import GSM8K_DATA_ENV

    spec = scenario.checks.gsm8k
    assert spec is not None
    if os.environ.get(GSM8K_DATA_ENV) or scenario.backend != "cpu":
        return None  # run_gsm8k reads AFD_GSM8K_DATA and explains what is missing
    return write_items(plan.run_dir / "gsm8k-items", spec.samples, max(spec.fewshot, 1))


def _gsm8k(plan: LaunchPlan, scenario: Scenario, procs: Servers) -> list[CheckResult]:
    from afd_e2e.checks.answer_agreement import compare_runs
    from afd_e2e.checks.gsm8k import Gsm8kRequest, run_gsm8k

    spec = scenario.checks.gsm8k
    assert spec is not None
    data = _gsm8k_data(plan, scenario)

    def request(base_url: str, out: str) -> Gsm8kRequest:
        return Gsm8kRequest(
            base_url=base_url,
            model=plan.served_name,
            samples=spec.samples,
            threshold=spec.threshold,
            concurrency=spec.concurrency,
            fewshot=spec.fewshot,
            data=data,
            out_dir=plan.run_dir / out,
            dbo=scenario.dbo.enabled,
            max_gen_toks=spec.max_gen_toks,
            timeout_s=scenario.timeouts.checks_s,
        )

    start = time.monotonic()
    result = run_gsm8k(request(plan.api.base_url, "gsm8k"))
    checks = [
        CheckResult(
            "gsm8k",
            result.passed,
            result.message,
            {
                "strict_match": result.strict,
                "flexible_extract": result.flexible,
                "n": result.n,
                "threshold": result.threshold,
            },
            time.monotonic() - start,
        )
    ]
    procs.check_alive("the GSM8K check")
    baseline = plan.role("baseline")
    if baseline is not None:
        start = time.monotonic()
        colocated = run_gsm8k(request(baseline.base_url, "gsm8k-colocated"))
        agreement = compare_runs(colocated.samples_path, result.samples_path)
        checks.append(
            CheckResult(
                "gsm8k_answers",
                agreement.passed,
                agreement.message,
                {
                    "compared": agreement.compared,
                    "differing": agreement.differing,
                    "colocated_strict_match": colocated.strict,
                },
                time.monotonic() - start,
            )
        )
    return checks


def _cancel_recover(plan: LaunchPlan, scenario: Scenario) -> CheckResult:
    spec = scenario.checks.cancel_recover
    assert spec is not None
    baseline = plan.role("baseline")
    start = time.monotonic()
    outcome = run_cancel_recover(
        plan.api.base_url,
        plan.served_name,
        streams=spec.streams,
        hang_up_after=spec.hang_up_after,
        max_tokens=spec.max_tokens,
        reference_url=baseline.base_url if baseline is not None else None,
        timeout_s=scenario.timeouts.checks_s,
    )
    return CheckResult(
        "cancel_recover",
        outcome.passed,
        outcome.message,
        outcome.figures,
        time.monotonic() - start,
    )


def _cold_restart(plan: LaunchPlan, scenario: Scenario, procs: Servers) -> CheckResult:
    """Stop every AFD server (the colocated baseline keeps serving), start
    each again from its own command line (same ports, a fresh rendezvous) and
    compare the greedy tokens of the two starts, and with the baseline. The
    CPU connectors' shared memory is anonymous (memfd), so it goes with the
    processes, which the stop checks are gone."""
    spec = scenario.checks.cold_restart
    assert spec is not None
    start = time.monotonic()

    def failed(message: str, figures: dict[str, object] | None = None) -> CheckResult:
        return CheckResult(
            "cold_restart",
            False,
            f"FAIL cold_restart: {message}",
            figures or {},
            time.monotonic() - start,
        )

    if not isinstance(procs, ProcessManager):
        return failed(f"the {type(procs).__name__} engine cannot restart servers")
    afd = [r for r in plan.roles if r.role != "baseline"]
    names = [f"{r.role}:{r.rank}" for r in afd]  # the process manager's names
    prompts = list((PROMPTS * (spec.prompts // len(PROMPTS) + 1))[: spec.prompts])
    baseline = plan.role("baseline")
    try:
        first = greedy_tokens(
            plan.api.base_url, plan.served_name, prompts, spec.max_tokens
        )
    except ParityError as exc:
        return failed(f"before the restart: {exc}")
    t_stop = time.monotonic()
    problems = [
        problem
        for name in reversed(names)  # the reverse of the start order
        for problem in procs.stop_process(name).problems()
    ]
    stop_s = time.monotonic() - t_stop
    if problems:
        return failed("stopping: " + "; ".join(problems), {"stop_s": stop_s})
    t_start = time.monotonic()
    for name in names:
        procs.restart(name)
    procs.wait_ready(
        {name: server_probe(plan, r) for name, r in zip(names, afd, strict=True)},
        scenario.timeouts.startup_s,
        names=names,
    )
    figures: dict[str, object] = {
        "servers": len(afd),
        "stop_s": round(stop_s, 2),
        "ready_again_s": round(time.monotonic() - t_start, 2),
    }
    try:
        second = greedy_tokens(
            plan.api.base_url, plan.served_name, prompts, spec.max_tokens
        )
        reference = (
            greedy_tokens(baseline.base_url, plan.served_name, prompts, spec.max_tokens)
            if baseline is not None
            else first
        )
    except ParityError as exc:
        return failed(f"after the restart: {exc}", figures)
    outcome = compare(reference, second)
    figures["mismatched_prompts"] = outcome.mismatches
    if second != first:
        return failed("the second start's tokens differ from the first's", figures)
    if not outcome.passed:
        return failed(outcome.message, figures)
    return CheckResult(
        "cold_restart",
        True,
        f"PASS cold_restart {len(afd)} AFD server(s) stopped in {stop_s:.1f} s "
        f"and ready again in {figures['ready_again_s']} s on the same ports; "
        f"{outcome.prompts} prompts, {outcome.tokens} tokens equal to the first "
        "start" + (" and the colocated run" if baseline is not None else ""),
        figures,
        time.monotonic() - start,
    )


def _ffn_failover(plan: LaunchPlan, scenario: Scenario, procs: Servers) -> CheckResult:
    """SIGKILL the active FFN server mid-generation (the fault is recorded in
    the teardown record as injected); see :mod:`afd_e2e.checks.ffn_failover`."""
    spec = scenario.checks.ffn_failover
    assert spec is not None
    start = time.monotonic()
    servers = [r for r in plan.roles if r.role == "ffn" and not r.headless]
    servers += [r for r in plan.roles if r.role == "standby"]
    attention = [r for r in plan.roles if r.role == "attention"]
    logs = procs.commands()
    baseline = plan.role("baseline")
    target = FailoverTarget(
        api_url=plan.api.base_url,
        model=plan.served_name,
        ffn=[FfnServer(f"{r.role}:{r.rank}", r.base_url) for r in servers],
        attention=[f"{r.role}:{r.rank}" for r in attention],
        attention_logs=[
            Path(logs[name]["log"])
            for name in (f"{r.role}:{r.rank}" for r in attention)
            if name in logs
        ],
        # What the servers parse: the connector's extra config, defaults in.
        peer_timeout_s=afd_config(scenario, "attention").extra.peer_timeout_s,
    )

    def reference(prompts: list[str], max_tokens: int) -> list[list[int]]:
        assert baseline is not None
        return greedy_tokens(baseline.base_url, plan.served_name, prompts, max_tokens)

    try:
        outcome = run_ffn_failover(
            target,
            spec,
            procs,
            reference if baseline is not None else None,
            timeout_s=scenario.timeouts.checks_s,
        )
    except ParityError as exc:
        return CheckResult(
            "ffn_failover",
            False,
            f"FAIL ffn_failover: the colocated reference: {exc}",
            duration_s=time.monotonic() - start,
        )
    return CheckResult(
        "ffn_failover",
        outcome.passed,
        outcome.message,
        outcome.figures,
        time.monotonic() - start,
    )


def _mark_afd_logs(plan: LaunchPlan) -> dict[Path, int]:
    """Byte offsets of the AFD roles' logs now; the baseline's is not evidence."""
    return mark_logs(
        plan.run_dir / f"{r.name}.log" for r in plan.roles if r.role != "baseline"
    )


def _dual_ubatch(marks: dict[Path, int], scenario: Scenario) -> CheckResult:
    """Every AFD rank of both roles must have logged a split step: with
    attention DP > 1 each rank splits its own steps."""
    topology = scenario.topology
    expected = [f"attention:{r}" for r in range(topology.attention.ranks)]
    expected += [f"ffn:{r}" for r in range(topology.ffn.ranks)]
    evidence = check_dual_ubatch(marks, expect_keys=expected)
    return CheckResult(
        "dual_ubatch_evidence",
        evidence.passed,
        evidence.message,
        dict(evidence.counts),
    )


def execute(
    plan: LaunchPlan,
    scenario: Scenario,
    options: RunOptions,
    engine: Engine | None = None,
) -> int:
    """Run the plan on ``engine`` (default: local subprocesses); the exit code
    follows ``report.Outcome``."""
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    timings = Timings(started_at=time.time())
    report = RunReport(
        plan.scenario_id,
        plan.run_id,
        {"id": plan.scenario_id, **scenario.model_dump(mode="json")},
        timings,
    )
    procs = (engine or LocalEngine()).servers(
        plan, scenario, stream_logs=options.stream_logs
    )
    with InterruptGuard() as guard:
        try:
            t0 = time.monotonic()
            for role in plan.roles:
                procs.start_server(role)
            timings.start_s = time.monotonic() - t0
            probes = {f"{r.role}:{r.rank}": server_probe(plan, r) for r in plan.roles}
            t1 = time.monotonic()
            timings.roles_ready_s = procs.wait_ready(
                probes, scenario.timeouts.startup_s
            )
            timings.ready_s = time.monotonic() - t1
            t2 = time.monotonic()
            # Marked before any check drives traffic; judged after all of them.
            marks = (
                _mark_afd_logs(plan) if scenario.checks.dual_ubatch_evidence else None
            )
            if scenario.checks.parity is not None:
                report.checks.append(_parity(plan, scenario))
                procs.check_alive("the parity check")
            if scenario.checks.gsm8k is not None:
                report.checks += _gsm8k(plan, scenario, procs)
            if scenario.checks.cancel_recover is not None:
                report.checks.append(_cancel_recover(plan, scenario))
                procs.check_alive("the cancel-and-recover check")
            if marks is not None:
                report.checks.append(_dual_ubatch(marks, scenario))
            if scenario.checks.cold_restart is not None:
                report.checks.append(_cold_restart(plan, scenario, procs))
                procs.check_alive("the cold-restart check")
            if scenario.checks.ffn_failover is not None:  # last: it kills servers
                report.checks.append(_ffn_failover(plan, scenario, procs))
                procs.check_alive("the FFN failover check")
            timings.checks_s = time.monotonic() - t2
            if options.keep_running:
                endpoints = ", ".join(f"{r.name} {r.base_url}" for r in plan.roles)
                print(f"serving: {endpoints}; Ctrl-C to stop", file=sys.stderr)
                while True:
                    time.sleep(1)
                    procs.check_alive("--keep-running")
        except RoleError as exc:
            report.error = str(exc)
        except Interrupted as exc:
            report.interrupted_by = exc.signame
        finally:
            t3 = time.monotonic()
            report.commands = procs.commands()
            report.teardown = procs.stop()
            report.teardown.budget_s = scenario.teardown.budget_s
            timings.teardown_s = time.monotonic() - t3
        report.interrupted_by = report.interrupted_by or guard.signame
    write_results_json(report, plan.run_dir / "results.json")
    write_junit(report, plan.run_dir / "junit.xml")
    write_summary_markdown(report, plan.run_dir / "summary.md")
    # The table is for people (stderr, always); --json is for programs (stdout).
    print(summary_table(report), file=sys.stderr)
    print(f"results: {Path(plan.run_dir) / 'results.json'}", file=sys.stderr)
    if options.json:
        print(json.dumps(report.to_dict(), indent=2))
    return report.outcome.exit_code
