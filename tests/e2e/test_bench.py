# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e bench`` for real: vLLM's serving benchmark against the colocated
baseline, then the AFD pair of cpu-eager-1a1f, a small workload; bench.json
holds both deployments' results and their ratio, and nothing is left running.
Figures are benchmarks' business (benchmarks/, docs/benchmarks.md): this checks that
the tool measures, not what it measures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_main_job import afd_e2e, processes_with_marker

pytestmark = pytest.mark.e2e

BENCH_LIMIT_S = 900


def test_bench_measures_both_deployments_with_one_workload(
    tmp_path: Path, tiny_model_root: Path
) -> None:
    run_dir = tmp_path / "bench"
    done = afd_e2e(
        "bench",
        "cpu-eager-1a1f",
        "--concurrency",
        "1,4",
        "--num-prompts",
        "4",
        "--input-len",
        "32",
        "--output-len",
        "8",
        "--run-dir",
        str(run_dir),
        "--model-root",
        str(tiny_model_root),
        "--json",
        timeout_s=BENCH_LIMIT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    saved = json.loads((run_dir / "bench.json").read_text())
    assert json.loads(done.stdout) == saved
    assert saved["errors"] == [] and saved["teardown"] == {"colocated": [], "afd": []}
    for deployment in ("colocated", "afd"):
        for concurrency in ("1", "4"):
            served = saved["results"][deployment][concurrency]
            assert served["completed"] == 4 and served["failed"] == 0
            assert served["max_concurrency"] == int(concurrency)
            assert served["total_output_tokens"] == 4 * 8  # --ignore-eos
            assert served["output_throughput"] > 0
    assert all(r > 0 for r in saved["ratio_output_throughput"].values())
    short = json.loads((run_dir / "bench-summary.json").read_text())
    assert (
        short["by_concurrency"]["4"]["ratio_output_throughput"]
        == (saved["ratio_output_throughput"]["4"])
    )
    # The AFD phase really ran AFD: its attention rank met its FFN rank.
    attention_log = (run_dir / "afd" / "attention-0.log").read_text(errors="replace")
    assert "AFD attention rank 0 joined the AFD world" in attention_log
    assert "AFD/colocated" in done.stderr  # the side-by-side table
    # How the roles overlapped in each run, from their afd:* counters: one
    # micro-batch, so the attention role waited for the FFN in every layer.
    for concurrency in ("1", "4"):
        fit = saved["overlap"][concurrency]
        assert fit["attention_wait_ms"] > 0 and fit["ffn_busy_ms"] > 0
        assert 0 < fit["pipeline_efficiency"] < 1
    assert "pipeline eff" in done.stderr
    assert processes_with_marker(saved["run_id"]) == []
