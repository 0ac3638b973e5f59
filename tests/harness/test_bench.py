# SPDX-License-Identifier: Apache-2.0
"""afd-e2e bench without servers: the workload both deployments get, what it
refuses (every bad flag at once, scenarios it cannot compare or run), and the
table and bench.json it makes from vLLM's serving-benchmark results. The real
run is tests/e2e/test_bench.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from lint_repo import ROOT
from test_procs import SERVER, marked_pids

from afd_e2e.bench.options import BenchOptions, client_argv
from afd_e2e.bench.report import BenchReport, table, write_json, write_summary
from afd_e2e.cli import main


def result(tok_s: float, tpot: float) -> dict[str, float]:
    """The fields of a vllm.benchmarks.serve result the report reads."""
    out = {"output_throughput": tok_s, "completed": 4, "failed": 0}
    for metric, base in (("ttft", 30.0), ("tpot", tpot), ("itl", tpot)):
        out[f"p50_{metric}_ms"] = base
        out[f"p99_{metric}_ms"] = base * 2
    return out


def test_both_deployments_get_the_same_workload() -> None:
    options = BenchOptions(concurrency=(1, 8), input_len=32, output_len=8, seed=7)
    argv = client_argv(
        options,
        8,
        base_url="http://127.0.0.1:9",
        served_name="tiny",
        tokenizer="/models/tiny",
        out=Path("out.json"),
    )
    assert argv[1:5] == ["-m", "afd_e2e.bench.serve_client", "out.json", "--"]
    rest = argv[5:]
    flags = {a: b for a, b in zip(rest, rest[1:], strict=False) if a.startswith("--")}
    assert flags["--max-concurrency"] == "8"
    assert flags["--random-input-len"] == "32"
    assert flags["--random-output-len"] == "8"
    assert flags["--seed"] == "7"
    assert flags["--tokenizer"] == "/models/tiny"
    assert "--ignore-eos" in argv


def test_every_bad_option_is_reported_at_once(capsys: pytest.CaptureFixture) -> None:
    code = main(
        ["bench", "--root", str(ROOT), "--concurrency", "0,4,4", "--output-len", "0"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "--concurrency: values must be >= 1, got 0" in err
    assert "--concurrency: values repeat: [0, 4, 4]" in err
    assert "--output-len: must be >= 1, got 0" in err


@pytest.mark.parametrize(
    ("scenario", "why"),
    [
        ("baseline-graph", "is not an AFD scenario: nothing to compare"),
        ("afd-dsv4-flash-async-cam-dp2tp4-ep8", "needs what is not in this build"),
        ("no-such-scenario", "no scenario 'no-such-scenario'"),
    ],
)
def test_scenarios_it_cannot_compare_start_nothing(
    scenario: str, why: str, capsys: pytest.CaptureFixture
) -> None:
    code = main(["bench", scenario, "--root", str(ROOT)])
    assert code == 2
    assert why in capsys.readouterr().err


def test_the_table_and_json_put_both_deployments_side_by_side(tmp_path: Path) -> None:
    report = BenchReport("cpu-eager-1a1f", BenchOptions(concurrency=(1, 8)))
    report.results["colocated"] = {1: result(100.0, 4.0), 8: result(400.0, 6.0)}
    report.results["afd"] = {1: result(50.0, 9.0)}
    report.errors.append("afd concurrency 8: the serving benchmark exited with 1")
    assert report.ratio(1) == 0.5 and report.ratio(8) is None
    lines = table(report).splitlines()
    assert lines[0].split()[:4] == ["conc", "colocated", "tok/s", "AFD"]
    assert lines[1].split()[:4] == ["1", "100.0", "50.0", "0.50"]
    assert "4.0 / 9.0" in lines[1] and "8.0 / 18.0" in lines[1]  # TPOT p50, p99
    assert lines[2].split()[:4] == ["8", "400.0", "-", "-"]
    saved = json.loads(write_json(report, tmp_path / "bench.json").read_text())
    assert saved["ratio_output_throughput"] == {"1": 0.5, "8": None}
    short = json.loads(write_summary(report, tmp_path / "s.json").read_text())
    one = short["by_concurrency"]["1"]
    assert one["afd"]["output_throughput"] == 50.0
    assert one["colocated"]["p50_tpot_ms"] == 4.0
    assert one["ratio_output_throughput"] == 0.5
    assert one["ratio_tpot_p50"] == 9.0 / 4.0
    assert short["by_concurrency"]["8"]["ratio_tpot_p50"] is None
    assert "latencies" not in json.dumps(short)
    assert saved["results"]["afd"]["1"]["output_throughput"] == 50.0
    assert saved["errors"] == report.errors


BENCH_DRIVER = """
import json, sys
from pathlib import Path
from afd_e2e.define import policy
from afd_e2e.bench.options import BenchOptions
from afd_e2e.bench.run import run_bench
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.launch.plan import LaunchPlan, RoleLaunch, free_port

server, run_id, run_dir, root = sys.argv[1:5]
plan = LaunchPlan(
    "cpu-eager-1a1f", run_id, Path(run_dir), "/nowhere", "tiny", afd_port=None
)
port = free_port()
env = {policy.RUN_ID_ENV: run_id, policy.PROCESS_ROLE_ENV: "baseline:0"}
argv = [sys.executable, server, "--port", str(port), "--never-ready"]
plan.roles.append(RoleLaunch("baseline", 0, argv, env, port))
scenario = Catalogue.load(Path(root)).get("cpu-eager-1a1f")
report = run_bench(plan, scenario, BenchOptions(concurrency=(1,)), say=lambda _: None)
print(json.dumps(report.to_dict()))
"""


def test_a_signal_to_a_bench_stops_its_servers(tmp_path: Path) -> None:
    """SIGTERM while the colocated server starts: the run ends interrupted and
    the server it started is stopped, not left behind."""
    run_id = f"test-{uuid.uuid4().hex[:12]}"
    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            BENCH_DRIVER,
            str(SERVER),
            run_id,
            str(tmp_path / "run"),
            str(ROOT),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not marked_pids(run_id):  # the server is up, never ready
            assert time.monotonic() < deadline, "the fake server never started"
            time.sleep(0.1)
        driver.send_signal(signal.SIGTERM)
        out, err = driver.communicate(timeout=30)
    finally:
        driver.kill()
    report = json.loads(out)
    assert report["interrupted_by"] == "SIGTERM", err
    assert "interrupted by SIGTERM" in report["errors"]
    assert report["teardown"]["colocated"] == []
    assert marked_pids(run_id) == []
