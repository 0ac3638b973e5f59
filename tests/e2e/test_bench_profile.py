# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e bench cpu-eager-1a1f --profile`` for real: the AFD pair alone
with step timing on, a steady decode load at two concurrencies, and a
calibration file that ``afd-e2e plan --calibration`` fits with the signs
physics requires; the raw timing lines are kept, and nothing is left running.
What the figures are is benchmarks/plan_vs_measured.py's business.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_main_job import afd_e2e, processes_with_marker

from afd_e2e.plan.calibration import load_calibration

pytestmark = pytest.mark.e2e

PROFILE_LIMIT_S = 600
CONCURRENCY = (1, 8)


def test_profile_writes_a_calibration_the_planner_fits(
    tmp_path: Path, tiny_model_root: Path
) -> None:
    run_dir = tmp_path / "profile"
    done = afd_e2e(
        "bench",
        "cpu-eager-1a1f",
        "--profile",
        "--concurrency",
        ",".join(map(str, CONCURRENCY)),
        "--input-len",
        "32",
        "--timing-window",
        "8",
        "--profile-windows",
        "3",
        "--run-dir",
        str(run_dir),
        "--model-root",
        str(tiny_model_root),
        "--json",
        timeout_s=PROFILE_LIMIT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    saved = json.loads((run_dir / "profile.json").read_text())
    assert json.loads(done.stdout) == saved
    assert saved["errors"] == [] and saved["teardown"] == []
    assert saved["layers"] == 3  # the tiny DeepSeek-V2's config.json
    # Only the AFD pair ran: no colocated baseline.
    assert sorted(p.name for p in (run_dir / "afd").glob("*.log")) == [
        "attention-0.log",
        "ffn-0.log",
    ]
    assert not (run_dir / "colocated").exists()
    for window, concurrency in zip(saved["windows"], CONCURRENCY, strict=True):
        # Measured by the server, over a window with every stream decoding.
        assert window["batch"] == pytest.approx(concurrency, rel=0.1)
        assert window["prompt_tokens_computed"] == 0
        assert window["running"] == [concurrency, concurrency]
        lines = window["timing_lines"]
        assert len(lines["attention"]) == 3
        assert lines["ffn"] and all("role=ffn" in ln for ln in lines["ffn"])
        # How the roles overlapped: one micro-batch, so the attention role
        # waits for every FFN layer and the efficiency stays below 1.
        fit = window["overlap"]
        assert fit["attention_wait_ms"] > 0 and fit["ffn_busy_ms"] > 0
        assert 0 < fit["pipeline_efficiency"] < 1
    # The file the planner reads, and what it fits from it.
    calibration = run_dir / "calibration.csv"
    fits = load_calibration(calibration)
    assert fits.rows == len(CONCURRENCY)
    # Every stage has a fixed cost per layer (the engine step on attention,
    # the kernels on the FFN, the hand-offs on the exchange), and each extra
    # sequence costs the attention role (its sampling, its KV cache).
    assert fits.attention.intercept > 0 and fits.attention.slope > 0
    assert fits.ffn.intercept > 0
    assert fits.exchange.intercept > 0
    planned = afd_e2e(
        "plan",
        "--model",
        "cpu-eager-1a1f",
        "--hardware",
        "cpu-2core",
        "--calibration",
        str(calibration),
        "--context",
        "64",
        "--evaluate",
        "1:1",
        "--batch",
        "8",
        "--micro-batches",
        "1",
        "--json",
        timeout_s=60,
    )
    assert planned.returncode == 0, planned.stderr
    best = json.loads(planned.stdout)["recommended"]
    step_ms = saved["windows"][1]["per_step_ms"]["attention"]["step_ms"]
    # On 1A1F at the measured batch, the planner's iteration is the step.
    assert best["tpot_s"] * 1e3 == pytest.approx(step_ms, rel=0.1)
    assert processes_with_marker(saved["run_id"]) == []
