# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e plan``'s calibrated predictions against measurements on this
machine: calibrate on cpu-eager-1a1f (``afd-e2e bench --profile``), predict
the output tokens/s of cpu-eager-1a1f (1A1F) and cpu-eager-2a1f (2A1F) at two
concurrencies (``afd-e2e plan --evaluate A:F --batch C/A``), measure them
with ``afd-e2e bench`` (vLLM's serving benchmark), and say whether the plan
ranks the measured deployments in the measured order.

Every step is the command a user runs, in its own process, one deployment at
a time. The prediction is total tokens/s (the planner's total batch over its
TPOT); every deployment runs on the same machine, so totals are compared.

Usage: python benchmarks/plan_vs_measured.py [--concurrency 4,16]
       [--profile-concurrency 1,2,4,8,16] [--num-prompts 64]
Prints the table and writes benchmarks/results/plan_vs_measured.json. Exits
0 when the ranking matches, 1 when it does not or a step failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from afd_e2e.define.catalogue import Catalogue
from afd_e2e.launch.plan import host_cpus

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CALIBRATED_ON = "cpu-eager-1a1f"
SCENARIOS = ("cpu-eager-1a1f", "cpu-eager-2a1f")
INPUT_LEN = 128
OUTPUT_LEN = 64
STEP_LIMIT_S = 1800
TEARDOWN_LIMIT_S = 120


def _afd_e2e(*args: str) -> subprocess.CompletedProcess[str]:
    """One ``afd-e2e`` command as a user runs it; its stderr streams through.
    Past ``STEP_LIMIT_S`` it gets SIGINT, so that it tears its servers down."""
    started = time.monotonic()
    print(f"$ afd-e2e {' '.join(args)}", file=sys.stderr, flush=True)
    child = subprocess.Popen(
        [sys.executable, "-m", "afd_e2e.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        out, _ = child.communicate(timeout=STEP_LIMIT_S)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=TEARDOWN_LIMIT_S)
        raise SystemExit(f"afd-e2e {args[0]} ran past {STEP_LIMIT_S} s") from None
    took = time.monotonic() - started
    print(f"  ({took:.0f} s, exit {child.returncode})", file=sys.stderr)
    return subprocess.CompletedProcess(child.args, child.returncode, out)


def _shape(scenario_id: str) -> tuple[int, int]:
    scenario = Catalogue.load(ROOT).get(scenario_id)
    ffn = scenario.topology.ffn
    assert ffn is not None, scenario_id
    return scenario.topology.attention.ranks, ffn.ranks


def calibrate(work: Path, concurrency: str) -> tuple[Path, dict[str, Any]]:
    run_dir = work / "profile"
    done = _afd_e2e(
        "bench",
        CALIBRATED_ON,
        "--profile",
        "--concurrency",
        concurrency,
        "--input-len",
        str(INPUT_LEN),
        "--run-dir",
        str(run_dir),
        "--json",
    )
    if done.returncode != 0:
        raise SystemExit(f"the profile failed (exit {done.returncode})")
    return run_dir / "calibration.csv", json.loads(done.stdout)


def predict(calibration: Path, scenario_id: str, concurrency: int) -> dict[str, Any]:
    attention, ffn = _shape(scenario_id)
    if concurrency % attention:
        raise SystemExit(f"concurrency {concurrency} does not split over {attention}")
    done = _afd_e2e(
        "plan",
        "--model",
        scenario_id,
        "--hardware",
        "cpu-2core",
        "--calibration",
        str(calibration),
        "--context",
        str(INPUT_LEN + OUTPUT_LEN / 2),
        "--evaluate",
        f"{attention}:{ffn}",
        "--batch",
        str(concurrency // attention),
        "--micro-batches",
        "1",
        "--tpot-ms",
        "1000",
        "--json",
    )
    if done.returncode != 0:
        raise SystemExit(f"afd-e2e plan {scenario_id}: exit {done.returncode}")
    plan = json.loads(done.stdout)["recommended"]
    return {
        "plan": plan["plan"],
        "batch_per_attention_instance": plan["batch_per_attention_instance"],
        "tpot_ms": plan["tpot_s"] * 1e3,
        "tokens_per_s": plan["tokens_per_s"],
        "tokens_per_s_per_device": plan["tokens_per_s_per_device"],
        "devices": plan["devices"],
        "stage_times_us": {k: v * 1e6 for k, v in plan["stage_times_s"].items()},
    }


def measure(
    work: Path, scenario_id: str, concurrency: str, num_prompts: int
) -> dict[str, Any]:
    run_dir = work / f"bench-{scenario_id}"
    done = _afd_e2e(
        "bench",
        scenario_id,
        "--concurrency",
        concurrency,
        "--input-len",
        str(INPUT_LEN),
        "--output-len",
        str(OUTPUT_LEN),
        "--num-prompts",
        str(num_prompts),
        "--run-dir",
        str(run_dir),
    )
    if done.returncode != 0:
        raise SystemExit(f"afd-e2e bench {scenario_id} failed (exit {done.returncode})")
    return json.loads((run_dir / "bench-summary.json").read_text())["by_concurrency"]


def ranking(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda k: -values[k])


def pairs_out_of_order(
    predicted: dict[str, float], measured: dict[str, float]
) -> list[str]:
    out = []
    for a, b in itertools.combinations(measured, 2):
        if (predicted[a] - predicted[b]) * (measured[a] - measured[b]) < 0:
            out.append(f"{a} vs {b}")
    return out


def _ratio(row: dict[str, Any]) -> float:
    """Measured over predicted output tokens/s."""
    return row["measured"]["output_throughput"] / row["predicted"]["tokens_per_s"]


def table(rows: list[dict[str, Any]]) -> str:
    header = (
        "deployment",
        "batch/A",
        "predicted tok/s",
        "measured tok/s",
        "measured/predicted",
        "pred TPOT ms",
        "meas TPOT p50 ms",
    )
    cells = [header] + [
        (
            r["deployment"],
            str(r["predicted"]["batch_per_attention_instance"]),
            f"{r['predicted']['tokens_per_s']:.0f}",
            f"{r['measured']['output_throughput']:.0f}",
            f"{_ratio(r):.2f}",
            f"{r['predicted']['tpot_ms']:.1f}",
            f"{r['measured']['p50_tpot_ms']:.1f}",
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="4,16")
    parser.add_argument("--profile-concurrency", default="1,2,4,8,16")
    parser.add_argument("--num-prompts", type=int, default=64)
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with tempfile.TemporaryDirectory(prefix="plan-vs-measured-") as tmp:
        work = Path(tmp)
        calibration, profile = calibrate(work, args.profile_concurrency)
        csv_text = calibration.read_text()
        predicted = {
            (s, c): predict(calibration, s, c) for s in SCENARIOS for c in concurrencies
        }
        measured = {
            s: measure(work, s, args.concurrency, args.num_prompts) for s in SCENARIOS
        }
    rows = []
    for s, c in predicted:
        attention, ffn = _shape(s)
        rows.append(
            {
                "deployment": f"{attention}A{ffn}F c={c}",
                "scenario": s,
                "concurrency": c,
                "predicted": predicted[(s, c)],
                "measured": measured[s][str(c)]["afd"],
                "colocated_measured": measured[s][str(c)]["colocated"],
            }
        )
    pred = {r["deployment"]: r["predicted"]["tokens_per_s"] for r in rows}
    meas = {r["deployment"]: r["measured"]["output_throughput"] for r in rows}
    wrong = pairs_out_of_order(pred, meas)
    print(table(rows))
    print(f"predicted ranking: {' > '.join(ranking(pred))}")
    print(f"measured ranking:  {' > '.join(ranking(meas))}")
    print("ranking matches" if not wrong else f"ranking differs: {'; '.join(wrong)}")
    result = {
        "what": (
            "afd-e2e plan --calibration (fitted on afd-e2e bench cpu-eager-1a1f "
            "--profile) predicted vs afd-e2e bench measured output tokens/s"
        ),
        "started": started,
        "machine": {"cpus": host_cpus(), "platform": platform.platform()},
        "workload": {
            "input_len": INPUT_LEN,
            "output_len": OUTPUT_LEN,
            "num_prompts": args.num_prompts,
            "concurrency": concurrencies,
        },
        "calibration_csv": csv_text,
        "profile_windows": [
            {k: w[k] for k in ("concurrency", "batch", "context", "per_step_ms", "row")}
            for w in profile["windows"]
        ],
        "rows": rows,
        "predicted_ranking": ranking(pred),
        "measured_ranking": ranking(meas),
        "ranking_matches": not wrong,
        "pairs_out_of_order": wrong,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "plan_vs_measured.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
