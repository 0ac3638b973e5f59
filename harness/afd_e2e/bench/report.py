# SPDX-License-Identifier: Apache-2.0
"""``bench.json`` and the side-by-side table of ``afd-e2e bench``: per
concurrency, output tok/s of both deployments, their ratio, and TTFT, TPOT and
ITL percentiles, all from vLLM's serving benchmark results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from afd_e2e.bench.options import METRICS, PERCENTILES, BenchOptions

DEPLOYMENTS = ("colocated", "afd")


@dataclass
class BenchReport:
    """Everything one bench run measured, by deployment and concurrency."""

    scenario_id: str
    options: BenchOptions
    run_id: str = ""
    """The run marker every server of the bench carried."""
    results: dict[str, dict[int, dict[str, Any]]] = field(
        default_factory=lambda: {d: {} for d in DEPLOYMENTS}
    )
    """deployment -> concurrency -> the serving benchmark's result JSON."""
    overlap: dict[int, dict[str, float]] = field(default_factory=dict)
    """concurrency -> how the AFD roles overlapped during that run
    (``afd_plugin.step_timing.overlap``, from their afd:* counters)."""
    step_parts_ms: dict[int, dict[str, dict[str, float]]] = field(default_factory=dict)
    """concurrency -> role -> its mean step parts in ms (they tile the step)."""
    errors: list[str] = field(default_factory=list)
    teardown: dict[str, list[str]] = field(default_factory=dict)
    """deployment -> teardown problems (a SIGKILL fails the run)."""
    interrupted_by: str | None = None
    """SIGINT or SIGTERM, when one ended the run."""

    def ratio(self, concurrency: int) -> float | None:
        """AFD output throughput over colocated, at one concurrency."""
        afd = self.results["afd"].get(concurrency)
        colocated = self.results["colocated"].get(concurrency)
        if not afd or not colocated or not colocated.get("output_throughput"):
            return None
        return afd["output_throughput"] / colocated["output_throughput"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario_id,
            "run_id": self.run_id,
            "options": asdict(self.options),
            "results": {
                d: {str(c): r for c, r in runs.items()}
                for d, runs in self.results.items()
            },
            "ratio_output_throughput": {
                str(c): self.ratio(c) for c in self.options.concurrency
            },
            "overlap": {str(c): o for c, o in self.overlap.items()},
            "step_parts_ms": {str(c): p for c, p in self.step_parts_ms.items()},
            "errors": self.errors,
            "teardown": self.teardown,
            "interrupted_by": self.interrupted_by,
        }


SUMMARY_KEYS = ("output_throughput",) + tuple(
    f"p{p}_{m}_ms" for m in METRICS for p in PERCENTILES
)
"""What ``bench-summary.json`` keeps of each serving-benchmark result."""


def summary(report: BenchReport) -> dict[str, Any]:
    """The figures a note or a results file quotes: per concurrency, output
    tok/s and the latency percentiles of both deployments, the throughput
    ratio and the TPOT p50 ratio. No per-request lists, no machine paths."""
    rows: dict[str, Any] = {}
    for c in report.options.concurrency:
        row: dict[str, Any] = {}
        for deployment in DEPLOYMENTS:
            result = report.results[deployment].get(c) or {}
            row[deployment] = {k: result.get(k) for k in SUMMARY_KEYS}
        tpot = [row[d]["p50_tpot_ms"] for d in ("afd", "colocated")]
        row["ratio_output_throughput"] = report.ratio(c)
        row["ratio_tpot_p50"] = tpot[0] / tpot[1] if all(tpot) else None
        row["afd_overlap"] = report.overlap.get(c)
        rows[str(c)] = row
    return {
        "scenario": report.scenario_id,
        "options": asdict(report.options),
        "by_concurrency": rows,
        "errors": report.errors,
    }


def write_summary(report: BenchReport, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary(report), indent=2) + "\n", encoding="utf-8")
    return path


def write_json(report: BenchReport, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def _num(result: Mapping[str, Any] | None, key: str, fmt: str = "{:.1f}") -> str:
    if not result or result.get(key) is None:
        return "-"
    return fmt.format(result[key])


def table(report: BenchReport) -> str:
    """The side-by-side table, one row per concurrency."""
    header = ["conc", "colocated tok/s", "AFD tok/s", "AFD/colocated"]
    header += ["AFD step ms", "attn wait ms", "FFN busy ms", "pipeline eff"]
    for metric in METRICS:
        for p in PERCENTILES:
            header.append(f"{metric.upper()} p{p} ms (coloc / AFD)")
    rows = []
    for c in report.options.concurrency:
        colocated = report.results["colocated"].get(c)
        afd = report.results["afd"].get(c)
        ratio = report.ratio(c)
        row = [
            str(c),
            _num(colocated, "output_throughput"),
            _num(afd, "output_throughput"),
            "-" if ratio is None else f"{ratio:.2f}",
        ]
        fit = report.overlap.get(c)
        row += [
            _num(fit, key, "{:.2f}")
            for key in (
                "step_ms",
                "attention_wait_ms",
                "ffn_busy_ms",
                "pipeline_efficiency",
            )
        ]
        for metric in METRICS:
            for p in PERCENTILES:
                key = f"p{p}_{metric}_ms"
                row.append(f"{_num(colocated, key)} / {_num(afd, key)}")
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows
    ]
    return "\n".join(lines)


def plot(report: BenchReport, path: Path) -> Path | None:
    """Output tok/s against concurrency for both deployments (needs the bench
    extra, matplotlib); None when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    for deployment in DEPLOYMENTS:
        runs = report.results[deployment]
        xs = [c for c in report.options.concurrency if c in runs]
        axes.plot(
            xs, [runs[c]["output_throughput"] for c in xs], marker="o", label=deployment
        )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("max concurrency")
    axes.set_ylabel("output tokens/s")
    axes.set_title(f"afd-e2e bench {report.scenario_id}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
