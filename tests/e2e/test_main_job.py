# SPDX-License-Identifier: Apache-2.0
"""The main job through the harness: ``afd-e2e run`` on the CPU scenarios
starts real vLLM servers (FFN, attention, a colocated baseline), checks token
parity and GSM8K agreement, tears everything down with no SIGKILL and no
process left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import afd_e2e

pytestmark = pytest.mark.e2e

RUN_LIMIT_S = 1500


def run_scenario(scenario: str, run_dir: Path, model_root: Path) -> dict:
    """``afd-e2e run`` as a user runs it; its results.json."""
    done = afd_e2e(
        "run",
        scenario,
        "--run-dir",
        str(run_dir),
        "--model-root",
        str(model_root),
        "--json",
        timeout_s=RUN_LIMIT_S,
    )
    results_path = run_dir / "results.json"
    assert results_path.exists(), done.stderr[-4000:]
    results = json.loads(results_path.read_text())
    assert done.returncode == results["exit_code"], done.stderr[-4000:]
    stdout_results = json.loads(done.stdout)
    assert stdout_results["run_id"] == results["run_id"]
    results["_stderr"] = done.stderr
    return results


def processes_with_marker(run_id: str) -> list[int]:
    """Pids whose environment carries this run's marker."""
    needle = f"AFD_E2E_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


CONNECTOR_DRIVEN = {"cpu-eager-1a1f-camasync", "cpu-eager-2a1f-camasync"}


@pytest.mark.parametrize(
    "scenario",
    [
        "cpu-eager-1a1f",
        "cpu-eager-1a1f-qwen3",
        "cpu-eager-1a1f-camp2p",
        "cpu-eager-2a1f",
        "cpu-eager-1a1f-camasync",
        "cpu-eager-2a1f-camasync",
        "cpu-eager-1a1f-kimi-k2",
        "cpu-eager-1a1f-qwen3-next",
        "cpu-eager-1a1f-qwen3.5",
        "cpu-eager-2a1f-qwen3.5",
    ],
)
def test_main_job_passes_parity_and_gsm8k_agreement(
    scenario: str, tmp_path: Path, tiny_model_root: Path
) -> None:
    results = run_scenario(scenario, tmp_path / "run", tiny_model_root)
    stderr = results.pop("_stderr")
    checks = {c["name"]: c for c in results["checks"]}
    assert results["outcome"] == "passed", (
        json.dumps(results["checks"], indent=1) + stderr[-3000:]
    )
    assert results["exit_code"] == 0

    parity = checks["parity"]
    assert parity["passed"] and parity["message"].startswith("PASS parity 8 prompts")
    assert parity["figures"]["mismatched_prompts"] == 0

    # GSM8K ran through lm-eval on both deployments, with the exact sample
    # count, and every AFD answer equals the colocated answer.
    assert checks["gsm8k"]["passed"], checks["gsm8k"]
    assert checks["gsm8k"]["figures"]["n"] == 8
    answers = checks["gsm8k_answers"]
    assert answers["passed"], answers
    assert answers["figures"]["compared"] == 8
    assert answers["figures"]["differing"] == 0

    # Both roles and the baseline served, and none needed SIGKILL.
    teardown = results["teardown"]
    assert teardown["escalated"] == [] and teardown["leaks"] == []
    assert set(teardown["exit_codes"]) >= {"ffn:0", "attention:0"}
    assert processes_with_marker(results["run_id"]) == []

    # The FFN log shows that it served the steps, the summary table was printed.
    ffn_log = (tmp_path / "run" / "ffn-0.log").read_text(errors="replace")
    assert "FFN daemon serving" in ffn_log
    if scenario in CONNECTOR_DRIVEN:
        # AFD-I2: no control plane; the FFN served dispatches as they came.
        assert "serving the dispatches of any attention rank" in ffn_log
        first = "served its first dispatch from attention rank {}, stage {}"
        if scenario == "cpu-eager-2a1f-camasync":
            # Both DP ranks, each MoE call in two dispatches (async ubatching).
            for source in (0, 1):
                for stage in (0, 1):
                    assert first.format(source, stage) in ffn_log
        else:
            assert first.format(0, 0) in ffn_log
            assert first.format(0, 1) not in ffn_log
    else:
        assert "the steps its control plane announces" in ffn_log
    assert "parity" in stderr and "PASS" in stderr
    assert (tmp_path / "run" / "junit.xml").exists()
    if scenario == "cpu-eager-2a1f":
        # Cancel and recover on two attention DP ranks: 8 of 16 streams hung
        # up, the other 8 got every token, a fresh batch matched colocated.
        storm = checks["cancel_recover"]
        assert storm["figures"]["hung_up"] == 8 and storm["figures"]["finished"] == 8
        assert storm["figures"]["recovered_prompts"] == 4
        assert storm["figures"]["tokens_not_generated"] > 0  # vLLM dropped them
        junit = (tmp_path / "run" / "junit.xml").read_text()
        assert 'name="cancel_recover"' in junit
        # Both AFD servers stopped without SIGKILL and came back on the same
        # ports with the same tokens; the final teardown found new pids.
        restart = checks["cold_restart"]
        assert restart["passed"] and restart["figures"]["servers"] == 2
        assert restart["figures"]["mismatched_prompts"] == 0
        assert 'name="cold_restart"' in junit
        assert ffn_log.count("FFN daemon serving") == 2  # one per start
        # Each role's time from SIGTERM to gone, inside the scenario's budget.
        assert teardown["budget_s"] == 20
        assert set(teardown["role_exit_s"]) >= {"ffn:0", "attention:0"}
        assert max(teardown["role_exit_s"].values()) <= teardown["duration_s"] <= 20


@pytest.mark.parametrize("scenario", ["cpu-dbo-2a1f", "cpu-dbo-1a1f-qwen3.5"])
def test_the_cpu_dbo_scenario_splits_steps_and_keeps_the_answers(
    scenario: str, tmp_path: Path, tiny_model_root: Path
) -> None:
    """The CPU DBO scenarios (Qwen3-MoE on two attention DP ranks, each
    splitting its own steps; Qwen3.5-MoE, whose linear-attention state is
    split with the batch) under AFD-I12's DBO floors: 24 GSM8K samples at 12
    concurrent requests, every AFD answer equal to the colocated one, and
    every rank of both roles logged steps that really ran two micro-batches.
    (cpu-dbo-1a1f's one-rank split runs in test_micro_batches.py.)"""
    results = run_scenario(scenario, tmp_path / "run", tiny_model_root)
    stderr = results.pop("_stderr")
    checks = {c["name"]: c for c in results["checks"]}
    assert results["outcome"] == "passed", (
        json.dumps(results["checks"], indent=1) + stderr[-3000:]
    )
    assert checks["gsm8k"]["figures"]["n"] == 24
    answers = checks["gsm8k_answers"]
    assert answers["figures"]["compared"] == 24
    assert answers["figures"]["differing"] == 0
    evidence = checks["dual_ubatch_evidence"]
    assert evidence["passed"], evidence
    records = evidence["figures"]
    assert records["attention:0"] > 0 and records["ffn:0"] > 0
    if scenario == "cpu-dbo-2a1f":
        assert records["attention:1"] > 0
    assert results["teardown"]["escalated"] == []
    assert processes_with_marker(results["run_id"]) == []
