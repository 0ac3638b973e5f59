# SPDX-License-Identifier: Apache-2.0
"""Run results: the outcome precedence, results.json, JUnit XML and the summary.

Pure data: no process is started.
"""

from __future__ import annotations

import itertools
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from afd_e2e.processes.teardown_record import ProcessRecord, TeardownRecord
from afd_e2e.publish.report import (
    BAD_INPUT_EXIT,
    CheckResult,
    Outcome,
    RunReport,
    Timings,
    summary_table,
    write_junit,
    write_results_json,
)

STUCK = ProcessRecord(4242, "ffn:0", ("python", "-m", "vllm", "serve"), "child")


def clean_teardown() -> TeardownRecord:
    return TeardownRecord(grace_s=15.0, marker_scan=False, duration_s=0.4)


def failed_teardown() -> TeardownRecord:
    record = clean_teardown()
    record.escalated.append(STUCK)
    return record


def report(**fields: object) -> RunReport:
    base: dict[str, object] = {
        "scenario_id": "cpu-eager-1a1f",
        "run_id": "cpu-eager-1a1f-20260101T000000Z-abcdef",
        "config": {"model": {"tiny": "qwen3-moe"}, "topology": [1, 1]},
        "timings": Timings(started_at=1_767_225_600.0, ready_s=12.5, teardown_s=0.4),
        "commands": {
            "attention:0": {"argv": ["vllm", "serve", "--port", "18000"], "env": {}}
        },
        "teardown": clean_teardown(),
    }
    base.update(fields)
    return RunReport(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("interrupted", "teardown_ok", "checks_ok"),
    list(itertools.product([True, False], repeat=3)),
)
def test_outcome_precedence(interrupted: bool, teardown_ok: bool, checks_ok: bool):
    outcome = Outcome.decide(
        interrupted=interrupted, teardown_ok=teardown_ok, checks_ok=checks_ok
    )
    if interrupted:
        expected = 130
    elif not teardown_ok:
        expected = 3
    elif not checks_ok:
        expected = 1
    else:
        expected = 0
    assert outcome.exit_code == expected


def test_exit_codes_are_distinct_and_leave_2_for_bad_input():
    codes = {o.exit_code for o in Outcome}
    assert codes == {0, 1, 3, 130}
    assert BAD_INPUT_EXIT == 2 and BAD_INPUT_EXIT not in codes


def test_sigkill_escalation_fails_a_run_whose_checks_passed():
    run = report(checks=[CheckResult("token-parity", True)], teardown=failed_teardown())
    assert run.outcome is Outcome.TEARDOWN_FAILED and run.outcome.exit_code == 3


def test_startup_error_or_missing_teardown_is_never_a_pass():
    assert report(error="attention:0 exited with code 3").outcome.exit_code == 1
    assert report(teardown=None).outcome is Outcome.TEARDOWN_FAILED


def test_results_json_records_config_commands_timings_checks_teardown(
    tmp_path: Path,
):
    run = report(
        checks=[
            CheckResult("token-parity", True, figures={"tokens": 32}, duration_s=3.0),
            CheckResult(
                "gsm8k",
                False,
                "accuracy 0.41 < threshold 0.5",
                {"accuracy": 0.41, "threshold": 0.5},
                40.0,
            ),
        ],
        teardown=failed_teardown(),
    )
    path = tmp_path / "results.json"
    write_results_json(run, path)
    data = json.loads(path.read_text())
    assert data["scenario"] == "cpu-eager-1a1f"
    assert data["outcome"] == "teardown-failed" and data["exit_code"] == 3
    assert data["config"] == {"model": {"tiny": "qwen3-moe"}, "topology": [1, 1]}
    assert data["commands"]["attention:0"]["argv"][:2] == ["vllm", "serve"]
    assert data["timings"]["started_at"] == "2026-01-01T00:00:00+00:00"
    assert data["timings"]["ready_s"] == 12.5 and data["timings"]["checks_s"] is None
    assert [(c["name"], c["passed"]) for c in data["checks"]] == [
        ("token-parity", True),
        ("gsm8k", False),
    ]
    assert data["checks"][1]["figures"] == {"accuracy": 0.41, "threshold": 0.5}
    assert data["teardown"]["ok"] is False
    escalated = data["teardown"]["escalated"]
    assert escalated == [
        {
            "pid": 4242,
            "name": "ffn:0",
            "cmdline": ["python", "-m", "vllm", "serve"],
            "found_by": "child",
        }
    ]
    assert not (tmp_path / "results.json.tmp").exists()


def test_junit_has_one_case_per_check_plus_teardown_and_counts_failures(
    tmp_path: Path,
):
    run = report(
        checks=[
            CheckResult("token-parity", True, duration_s=1.0),
            CheckResult("gsm8k", False, "accuracy 0.41 < threshold 0.5"),
        ],
        teardown=failed_teardown(),
    )
    path = tmp_path / "junit.xml"
    write_junit(run, path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "3" and suite.get("failures") == "2"
    assert suite.get("errors") == "0"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["token-parity", "gsm8k", "teardown"]
    assert cases["token-parity"].find("failure") is None
    gsm8k = cases["gsm8k"].find("failure")
    assert gsm8k is not None
    assert gsm8k.get("message") == "accuracy 0.41 < threshold 0.5"
    teardown = cases["teardown"].find("failure")
    assert teardown is not None and "pid 4242 ffn:0" in teardown.get("message", "")


def test_junit_marks_an_interrupted_run_as_an_error(tmp_path: Path):
    path = tmp_path / "junit.xml"
    write_junit(report(interrupted_by="SIGINT"), path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    error = suite.find("testcase[@name='run']/error")
    assert error is not None and error.get("message") == "interrupted by SIGINT"


def test_summary_table_shows_each_check_teardown_and_exit_code():
    run = report(
        checks=[
            CheckResult("token-parity", True, figures={"tokens": 32}, duration_s=3.0),
            CheckResult("gsm8k", False, "accuracy 0.41 < threshold 0.5"),
        ],
        teardown=failed_teardown(),
    )
    lines = summary_table(run).splitlines()
    assert lines[0].startswith("afd-e2e run cpu-eager-1a1f")
    assert lines[1].split() == ["CHECK", "RESULT", "TIME", "DETAIL"]
    assert lines[2].split()[:4] == ["token-parity", "PASS", "3.0s", "tokens=32"]
    assert lines[3].split()[:2] == ["gsm8k", "FAIL"]
    assert "accuracy 0.41 < threshold 0.5" in lines[3]
    assert lines[4].split()[:2] == ["teardown", "FAIL"]
    assert "needed SIGKILL" in lines[4] and "pid 4242" in lines[4]
    assert lines[-1] == "outcome: teardown-failed (exit 3)"


def test_summary_table_shows_why_a_run_stopped_early_with_the_log_tail():
    error = (
        "ffn:0 (pid 4242) exited with code 1 during start-up, 44.6 s after launch; "
        "last 2 lines of ffn-0.log:\n"
        "  | AFDPeerError: could not listen for the AFD rendezvous\n"
        "  | [Errno 98] Address already in use"
    )
    lines = summary_table(report(error=error, teardown=failed_teardown())).splitlines()
    assert lines[1] == (
        "stopped early: ffn:0 (pid 4242) exited with code 1 during start-up, "
        "44.6 s after launch; last 2 lines of ffn-0.log:"
    )
    assert lines[2:4] == [
        "  | AFDPeerError: could not listen for the AFD rendezvous",
        "  | [Errno 98] Address already in use",
    ]
    assert lines[4].split() == ["CHECK", "RESULT", "TIME", "DETAIL"]


def test_summary_table_names_the_slowest_role_and_the_budget():
    record = clean_teardown()
    record.role_exit_s = {"attention:0": 0.4, "ffn:0": 2.5}
    record.budget_s = 20.0
    table = summary_table(report(teardown=record))
    assert "slowest ffn:0 2.5s (budget 20s)" in table
    record.budget_s = 1.0
    record.duration_s = 2.6
    run = report(teardown=record)
    assert run.outcome is Outcome.TEARDOWN_FAILED
    assert "over its budget of 1 s (slowest: ffn:0 2.5 s" in summary_table(run)
    assert json.loads(json.dumps(run.to_dict()))["teardown"]["role_exit_s"] == {
        "attention:0": 0.4,
        "ffn:0": 2.5,
    }
