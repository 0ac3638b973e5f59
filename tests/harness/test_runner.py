# SPDX-License-Identifier: Apache-2.0
"""afd-e2e run's executor end to end against fake role servers: parity verdicts,
the evidence check, results.json, JUnit, exit codes, and nothing left running."""

from __future__ import annotations

import json
import re
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from lint_repo import ROOT
from test_procs import SERVER, marked_pids

from afd_e2e.define import policy
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.define.scenario import Checks, ParityCheck, Timeouts
from afd_e2e.launch.plan import LaunchPlan, RoleLaunch, free_port
from afd_e2e.runner import RunOptions, execute

BASE = Catalogue.load(ROOT).get("cpu-eager-1a1f")


def fake_plan(tmp_path: Path, run_id: str, **role_flags: list[str]) -> LaunchPlan:
    plan = LaunchPlan(
        "cpu-eager-1a1f", run_id, tmp_path / "run", "/nowhere", "tiny", afd_port=None
    )
    for role in ("baseline", "ffn", "attention"):
        port = free_port()
        argv = [
            sys.executable,
            str(SERVER),
            "--port",
            str(port),
            *role_flags.get(role, []),
        ]
        env = {policy.RUN_ID_ENV: run_id, policy.PROCESS_ROLE_ENV: f"{role}:0"}
        plan.roles.append(RoleLaunch(role, 0, argv, env, port))
    return plan


def scenario(**checks: object):
    return BASE.model_copy(
        update={
            "checks": Checks(**checks),
            "timeouts": Timeouts(startup_s=20, checks_s=60, teardown_grace_s=3),
        }
    )


def args() -> RunOptions:
    return RunOptions(json=True)


@pytest.fixture
def run_id():
    rid = f"runner-{uuid.uuid4().hex[:10]}"
    yield rid
    assert marked_pids(rid) == []


def test_parity_pass_writes_results_and_junit(tmp_path: Path, run_id: str, capsys):
    plan = fake_plan(tmp_path, run_id)
    code = execute(plan, scenario(parity=ParityCheck(prompts=5, max_tokens=6)), args())
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    results = json.loads((plan.run_dir / "results.json").read_text())
    assert results == printed
    parity = next(c for c in results["checks"] if c["name"] == "parity")
    assert parity["passed"] and parity["figures"]["tokens"] == 30
    assert "identical to the colocated run" in parity["message"]
    assert set(results["commands"]) == {"baseline:0", "ffn:0", "attention:0"}
    junit = ET.parse(plan.run_dir / "junit.xml").getroot()
    assert "parity" in ET.tostring(junit, encoding="unicode")
    # The Markdown summary a CI step posts as its annotation.
    summary = (plan.run_dir / "summary.md").read_text()
    assert summary.startswith("### afd-e2e run `cpu-eager-1a1f`: passed (exit 0)")
    assert f"Run `{run_id}`." in summary
    assert "| parity | PASS |" in summary and "tokens=30" in summary
    assert "| teardown | PASS |" in summary and "SIGTERM to gone:" in summary
    for role in ("baseline-0", "ffn-0", "attention-0"):
        assert (
            "POST /v1/completions" in (plan.run_dir / f"{role}.log").read_text()
            or role == "ffn-0"
        )


def test_parity_mismatch_fails_the_run(tmp_path: Path, run_id: str, capsys):
    plan = fake_plan(tmp_path, run_id, attention=["--token-offset", "1"])
    code = execute(plan, scenario(parity=ParityCheck(prompts=3, max_tokens=4)), args())
    results = json.loads(capsys.readouterr().out)
    assert code == 1
    parity = results["checks"][0]
    assert not parity["passed"]
    assert parity["message"].startswith(
        "FAIL parity 3/3 prompts differ; first: prompt 0"
    )


def test_role_dying_at_start_fails_fast_with_its_log(tmp_path: Path, run_id, capsys):
    plan = fake_plan(tmp_path, run_id, ffn=["--die-after-s", "0.2"])
    code = execute(plan, scenario(parity=ParityCheck(prompts=1, max_tokens=1)), args())
    results = json.loads(capsys.readouterr().out)
    assert code == 1
    assert "ffn:0" in results["error"]
    assert "cannot load the model weights" in results["error"]


def test_sigkill_escalation_fails_even_when_checks_pass(tmp_path: Path, run_id, capsys):
    plan = fake_plan(tmp_path, run_id, ffn=["--ignore-sigterm"])
    code = execute(plan, scenario(parity=ParityCheck(prompts=2, max_tokens=2)), args())
    results = json.loads(capsys.readouterr().out)
    assert code == 3
    assert all(c["passed"] for c in results["checks"])
    assert "ffn:0" in json.dumps(results["teardown"])


def evidence_check(results: dict) -> dict:
    found = [c for c in results["checks"] if c["name"] == "dual_ubatch_evidence"]
    assert len(found) == 1, [c["name"] for c in results["checks"]]
    return found[0]


def test_evidence_check_runs_without_gsm8k_and_ignores_the_baseline(
    tmp_path: Path, run_id: str, capsys
):
    # Only the colocated baseline logs records: they are not AFD evidence.
    plan = fake_plan(tmp_path, run_id, baseline=["--evidence-role", "attention"])
    checks = {"parity": ParityCheck(prompts=2, max_tokens=2)}
    code = execute(plan, scenario(**checks, dual_ubatch_evidence=True), args())
    results = json.loads(capsys.readouterr().out)
    assert code == 1
    evidence = evidence_check(results)
    assert not evidence["passed"] and evidence["figures"] == {}
    assert evidence["message"].startswith(
        "FAIL evidence dual_ubatch: no step ran with two micro-batches after the "
        "evaluation started (0 records in "
    )
    assert "attention-0.log" in evidence["message"]
    assert "baseline-0.log" not in evidence["message"]
    assert "AFD_EVIDENCE" in (plan.run_dir / "baseline-0.log").read_text()


def test_evidence_check_counts_only_records_logged_after_the_mark(
    tmp_path: Path, run_id: str, capsys
):
    # The readiness probe's completion logs one record before the checks start.
    plan = fake_plan(tmp_path, run_id, attention=["--evidence-role", "attention"])
    checks = {"parity": ParityCheck(prompts=3, max_tokens=2)}
    code = execute(plan, scenario(**checks, dual_ubatch_evidence=True), args())
    results = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in results["checks"]] == [
        "parity",
        "dual_ubatch_evidence",
    ]
    evidence = evidence_check(results)
    assert evidence["figures"] == {"attention:0": 3}
    # Every rank of both roles must show a split step: this fake FFN logged
    # none, so the check fails naming it.
    assert code != 0 and not evidence["passed"]
    assert evidence["message"] == (
        "FAIL evidence dual_ubatch: no record from ffn:0 (records: attention:0=3)"
    )
    log = (plan.run_dir / "attention-0.log").read_text()
    assert log.count("AFD_EVIDENCE dual_ubatch") == 4


def test_a_run_prints_its_own_lines_and_no_server_output_by_default(
    tmp_path: Path, run_id: str, capsys
):
    plan = fake_plan(tmp_path, run_id)
    code = execute(
        plan, scenario(parity=ParityCheck(prompts=2, max_tokens=2)), RunOptions()
    )
    err = capsys.readouterr().err
    assert code == 0
    started = [line for line in err.splitlines() if line.startswith("afd-e2e: started")]
    assert len(started) == 3  # one per server: name, pid, port, log
    for role, line in zip(("baseline", "ffn", "attention"), started, strict=True):
        port = plan.role(role).api_port
        assert f" {role}:0 (pid " in line and f"on port {port}, " in line
        assert line.endswith(f"log {plan.run_dir / f'{role}-0.log'}")
    assert "afd-e2e: 3 servers ready after " in err
    assert "[attention:0]" not in err and "POST /v1/completions" not in err
    assert re.search(r"^parity +PASS ", err, re.M)
    assert "outcome: passed (exit 0)" in err
    log = (plan.run_dir / "attention-0.log").read_text()
    assert "fake role server pid" in log and "POST /v1/completions" in log


def test_stream_logs_prints_the_servers_output_too(tmp_path: Path, run_id, capsys):
    plan = fake_plan(tmp_path, run_id)
    options = RunOptions(stream_logs=True)
    code = execute(plan, scenario(parity=ParityCheck(prompts=2, max_tokens=2)), options)
    err = capsys.readouterr().err
    assert code == 0
    for role in ("baseline", "ffn", "attention"):
        log = (plan.run_dir / f"{role}-0.log").read_text().splitlines()
        assert [f"[{role}:0] {line}" for line in log] == [
            line for line in err.splitlines() if line.startswith(f"[{role}:0] ")
        ]
    assert "[attention:0] POST /v1/completions" in err


def test_a_failing_role_has_its_log_tail_printed_without_streaming(
    tmp_path: Path, run_id, capsys
):
    plan = fake_plan(tmp_path, run_id, ffn=["--die-after-s", "0.2"])
    code = execute(
        plan, scenario(parity=ParityCheck(prompts=1, max_tokens=1)), RunOptions()
    )
    err = capsys.readouterr().err
    assert code == 1
    assert re.search(r"^stopped early: ffn:0 \(pid \d+\) exited with code 3", err, re.M)
    assert "  | fatal: cannot load the model weights" in err
    assert "[ffn:0]" not in err


def test_run_stream_logs_flag_reaches_the_executor(tmp_path: Path, monkeypatch):
    import afd_e2e.commands.run as run_command
    import afd_e2e.runner as runner
    from afd_e2e.cli import main

    seen: list[RunOptions] = []
    monkeypatch.setattr(run_command, "ready_to_start", lambda args, launchable: None)
    monkeypatch.setattr(
        runner, "execute", lambda plan, scenario, options, engine: seen.append(options)
    )
    common = ["--root", str(ROOT), "--model-root", str(tmp_path)]
    assert main(["run", "cpu-eager-1a1f", *common]) == 0
    assert main(["run", "cpu-eager-1a1f", "--stream-logs", *common]) == 0
    assert [o.stream_logs for o in seen] == [False, True]
