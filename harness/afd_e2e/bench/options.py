# SPDX-License-Identifier: Apache-2.0
"""What one ``afd-e2e bench`` measures (concurrencies, lengths, seed) and the
serving-benchmark command line it becomes for one server."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

CLIENT_MODULE = "afd_e2e.bench.serve_client"
PERCENTILES = (50, 99)
METRICS = ("ttft", "tpot", "itl")


@dataclass(frozen=True)
class BenchOptions:
    """The workload, identical for the colocated baseline and the AFD run."""

    concurrency: tuple[int, ...] = (1, 8, 32)
    """``--max-concurrency`` values, one benchmark run each."""
    input_len: int = 128
    """Prompt tokens of the random dataset."""
    output_len: int = 64
    """Generated tokens per request (``--ignore-eos``: exactly this many)."""
    num_prompts: int = 48
    """Requests per run."""
    seed: int = 0
    """Dataset seed: both deployments get the same prompts."""
    timeout_s: float = 1800.0
    """One benchmark run is killed (and fails) after this long."""

    def errors(self) -> list[str]:
        """Every problem, each naming its flag."""
        out = concurrency_errors(self.concurrency)
        if len(set(self.concurrency)) != len(self.concurrency):
            out.append(f"--concurrency: values repeat: {list(self.concurrency)}")
        return out + bound_errors(
            (
                ("--input-len", self.input_len),
                ("--output-len", self.output_len),
                ("--num-prompts", self.num_prompts),
            ),
            seed=self.seed,
            timeout_s=self.timeout_s,
        )


def concurrency_errors(concurrency: Sequence[int]) -> list[str]:
    """``--concurrency`` problems every bench mode shares: none given, or a
    value below one."""
    out = [] if concurrency else ["--concurrency: give at least one value"]
    return out + [
        f"--concurrency: values must be >= 1, got {c}" for c in concurrency if c < 1
    ]


def bound_errors(
    counts: Iterable[tuple[str, int]], *, seed: int, timeout_s: float
) -> list[str]:
    """Counts below one (each naming its flag), a negative seed, a timeout
    that is not positive."""
    out = [f"{flag}: must be >= 1, got {value}" for flag, value in counts if value < 1]
    if seed < 0:
        out.append(f"--seed: must be >= 0, got {seed}")
    if timeout_s <= 0:
        out.append(f"--timeout-s: must be > 0, got {timeout_s}")
    return out


def client_argv(
    options: BenchOptions,
    concurrency: int,
    *,
    base_url: str,
    served_name: str,
    tokenizer: str,
    out: Path,
) -> list[str]:
    """The serving benchmark's command line against one server."""
    return [
        sys.executable,
        "-m",
        CLIENT_MODULE,
        str(out),
        "--",
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        served_name,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(options.input_len),
        "--random-output-len",
        str(options.output_len),
        "--num-prompts",
        str(options.num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--ignore-eos",
        "--seed",
        str(options.seed),
        "--disable-tqdm",
        "--percentile-metrics",
        ",".join(METRICS),
        "--metric-percentiles",
        ",".join(str(p) for p in PERCENTILES),
    ]
