# SPDX-License-Identifier: Apache-2.0
"""What a standby FFN failover costs the streams it happens under.

One 1A1F deployment with ``--standbys`` standby FFN servers (tiny
Qwen3-MoE on the CPU, real vLLM). Each round streams ``--concurrency``
greedy completions, records when every token arrived, and once every
stream has ``KILL_AFTER_TOKENS`` tokens SIGKILLs the active FFN server (the
FFN server first, then the standby promoted last). It reports, per round:

- the stall: the largest gap between two tokens of one stream that ends
  after the kill (token times are the client's: tokens made before the
  kill may still arrive after it);
- the step time beside it: the median gap between tokens of the same round
  before the kill (the baseline, measured in the same run);
- where the stall goes, from the attention rank's failover timing lines (on
  the system-wide monotonic clock, which this process shares): detecting the
  dead peer after the SIGKILL went out, the promotion at the rendezvous, the
  new data path, the resend, the standby's first answer, and the rest (the
  interrupted step's other layers, sampling, delivery to the client, and
  the part of the step made before the kill); they add up to the stall.

Every stream must complete (a failed one fails the benchmark).

Usage: python benchmarks/failover.py [--standbys 3] [--concurrency 16]
       [--max-tokens 96] [--write]
With --write, the figures go to benchmarks/results/failover.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from afd_e2e.checks.failover_streams import Streams
from afd_e2e.launch.plan import free_port
from afd_e2e.processes.servers import VllmServer, VllmServers, afd_config
from afd_e2e.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
KILL_AFTER_TOKENS = 8
REQUEST_TIMEOUT_S = 120.0
FAILOVER_LINE = re.compile(
    r"afd-plugin: failover: FFN rank \d+ \(pid (\d+)\) -> standby \d+ \(pid (\d+)\) "
    r"in ([0-9.]+) s"
)
TIMING_LINE = re.compile(
    r"failover timing: noticed at monotonic ([0-9.]+) s; promotion ([0-9.]+) ms, "
    r"new data path ([0-9.]+) ms, resend ([0-9.]+) ms"
)
ANSWER_LINE = re.compile(r"failover timing: the standby's first answer .* ([0-9.]+) ms")
PARTS = (
    "detection",
    "promotion",
    "new data path",
    "resend",
    "first answer",
    "the rest",
)
"""Where the largest stall goes, in order; they add up to it."""
FLAGS = (("avx512_bf16", "AVX512-BF16"), ("amx_tile", "AMX"))


def stall_and_step(times: list[list[float]], kill_at: float) -> tuple[float, float]:
    """(the largest gap between two tokens of one stream that ends after the
    kill, the median gap between tokens before it). Token times are when
    the client got them: tokens the engine made before the kill may still
    arrive after it, so the stall is not cut at the kill."""
    stalls, before = [], []
    for arrivals in times:
        distinct = sorted(set(arrivals))
        gaps = list(zip(distinct, distinct[1:], strict=False))
        stalls += [b - a for a, b in gaps if b > kill_at]
        before += [b - a for a, b in gaps if b <= kill_at]
    return max(stalls), statistics.median(before)


def attribute(
    stall: float, kill_at: float, timing: tuple[float, ...], answer: float
) -> dict[str, float]:
    """The stall's parts in ms (``PARTS``); the last is what is left."""
    noticed, promotion, path, resend = timing
    parts = {
        "detection": (noticed - kill_at) * 1e3,
        "promotion": promotion,
        "new data path": path,
        "resend": resend,
        "first answer": answer,
    }
    parts["the rest"] = stall * 1e3 - sum(parts.values())
    return {k: round(v, 2) for k, v in parts.items()}


def one_round(
    attention: VllmServer,
    victim: VllmServer,
    servers: VllmServers,
    model: str,
    concurrency: int,
    max_tokens: int,
) -> dict[str, Any]:
    offset = len(attention.log_text())
    prompts = [
        f"Stream {i}: count the failovers, one by one:" for i in range(concurrency)
    ]
    streams = Streams(attention.base_url, model, prompts, max_tokens, REQUEST_TIMEOUT_S)
    streams.start()
    if not streams.wait_until(
        lambda got: min(got) >= KILL_AFTER_TOKENS, REQUEST_TIMEOUT_S, 0.01
    ):
        raise SystemExit("the streams ended or stalled before the kill")
    kill_at = victim.kill()
    if not streams.join(REQUEST_TIMEOUT_S + 30):
        raise SystemExit("a stream did not end")
    failed = [e.describe() for e in streams.ends().values() if not e.completed]
    if failed:
        raise SystemExit(f"streams failed across the failover: {failed[:3]}")
    log = attention.log_text()[offset:]
    lines = FAILOVER_LINE.findall(log)
    timings = TIMING_LINE.findall(log)
    answers = ANSWER_LINE.findall(log)
    if len(lines) != 1 or len(timings) != 1 or len(answers) != 1:
        raise SystemExit(f"expected one failover, got {lines} {timings} {answers}")
    _, standby_pid, failover_s = lines[0]
    stall, step = stall_and_step(streams.arrivals(), kill_at)
    return {
        "killed": victim.name,
        "standby_pid": int(standby_pid),
        "stall_ms": round(stall * 1000, 2),
        "step_ms": round(step * 1000, 2),
        "stall_over_step": round(stall / step, 1),
        "failover_ms": round(float(failover_s) * 1000, 2),
        "parts_ms": attribute(
            stall, kill_at, tuple(map(float, timings[0])), float(answers[0])
        ),
        "completed": concurrency,
    }


def machine() -> str:
    """This machine as far as the figures depend on it."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        flags = []
    extras = [name for flag, name in FLAGS if flag in flags]
    return (
        f"{len(os.sched_getaffinity(0))} CPUs"
        + (f" with {', '.join(extras)}" if extras else "")
        + ", tiny Qwen3-MoE in its own dtype"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    model = build_tiny_model("qwen3_moe")
    port = free_port()
    common: dict[str, Any] = {
        "num_ffn_standby": args.standbys,
        "connector_extra_config": {"rendezvous_timeout_s": 300.0, "peer_timeout_s": 20},
    }
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as logs, VllmServers(Path(logs)) as servers:
        ffn = servers.start("ffn", model, afd_config("ffn", port, **common))
        standbys = [
            servers.start(
                f"standby{i}",
                model,
                afd_config("ffn", port, standby=True, **common),
            )
            for i in range(args.standbys)
        ]
        attention = servers.start(
            "attention", model, afd_config("attention", port, **common)
        )
        for server in (attention, ffn, *standbys):
            server.wait_ready()
        served = str(model)
        victim = ffn
        for _ in range(args.standbys):
            result = one_round(
                attention, victim, servers, served, args.concurrency, args.max_tokens
            )
            rounds.append(result)
            print(json.dumps(result), flush=True)
            victim = next(s for s in standbys if result["standby_pid"] in s.pids())
    return {
        "machine": machine(),
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "rounds": rounds,
    }


def table(figures: dict[str, Any]) -> str:
    """Per round: the stall, the step beside it, and the stall's parts."""
    rounds = figures["rounds"]
    header = ["", *(f"round {i} ({r['killed']})" for i, r in enumerate(rounds, 1))]
    rows = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]

    def row(name: str, values: list[Any]) -> None:
        rows.append("| " + " | ".join([name, *map(str, values)]) + " |")

    row("step (median gap between tokens, ms)", [r["step_ms"] for r in rounds])
    row(
        "stall (largest gap between tokens after the kill, ms)",
        [r["stall_ms"] for r in rounds],
    )
    row("stall / step", [f"{r['stall_over_step']}x" for r in rounds])
    for part in PARTS:
        row(f"  {part} (ms)", [r["parts_ms"][part] for r in rounds])
    row("streams completed", [r["completed"] for r in rounds])
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--standbys", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    figures = run(args)
    print(table(figures))
    if args.write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "failover.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
