# SPDX-License-Identifier: Apache-2.0
"""Decode throughput of 1A1F AFD deployments on the CPU (one and two
micro-batches per step) as a ratio to colocated vLLM, where each step's time
goes (the attention role's AFD_STEP_TIMING parts, which must add up to the
step the client measured), and the per-layer exchange round trip of each CPU
data path (gloo, shared memory) as a ratio to an in-process copy of the same
tensor; all measured in the same run.

Usage: python benchmarks/cpu_afd.py [--arch qwen3_moe] [--new-tokens 32]
       python benchmarks/cpu_afd.py --exchange-only   # the round trips alone
Writes benchmarks/results/cpu_afd.json and, with matplotlib, the plot the
documentation shows (docs/assets/cpu_afd.png).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from afd_e2e.launch.plan import cpu_share, free_port, host_cpus
from afd_e2e.processes.servers import CPU_ENV, VllmServer, VllmServers
from afd_e2e.tiny_model import build_tiny_model
from afd_plugin.step_timing import ATTENTION_PARTS, overlap
from afd_plugin.step_timing import parse_line as parse_timing

ROOT = Path(__file__).resolve().parents[1]

BATCHES = (1, 8, 32)
EXCHANGE_SHAPES = ((1, 64), (8, 64), (32, 64), (8, 2048), (64, 7168))
RESULTS = ROOT / "benchmarks" / "results"
PLOT = ROOT / "docs" / "assets" / "cpu_afd.png"


# -- decode throughput ------------------------------------------------------


def batch_prompts(batch: int) -> list[str]:
    return [f"Janet has {i} apples and buys {i + 3} more." for i in range(batch)]


def decode_rate(server: VllmServer, batch: int, new_tokens: int, samples: int) -> float:
    """Completion tokens per second of one batched greedy request; the median
    of ``samples`` requests (the machine is shared and noisy)."""
    prompts = batch_prompts(batch)
    server.complete(prompts[:1], max_tokens=2)  # warm-up
    rates = []
    for _ in range(samples):
        started = time.perf_counter()
        tokens = server.complete(prompts, max_tokens=new_tokens, timeout_s=600)
        elapsed = time.perf_counter() - started
        rates.append(sum(len(t) for t in tokens) / elapsed)
    return statistics.median(rates)


def marginal_step_ms(
    server: VllmServer, batch: int, new_tokens: int, samples: int
) -> float:
    """Milliseconds per decode step as the client sees them: the extra time a
    request of ``new_tokens`` takes over one of half as many, per extra token
    (the median of ``samples`` pairs). The fixed costs (HTTP, tokenizing, the
    prefill step) cancel out, so this is what the server-side parts of a
    decode step must add up to."""
    prompts = batch_prompts(batch)
    half = max(1, new_tokens // 2)
    steps = []
    for _ in range(samples):
        timed = []
        for tokens in (half, new_tokens):
            started = time.perf_counter()
            server.complete(prompts, max_tokens=tokens, timeout_s=600)
            timed.append(time.perf_counter() - started)
        steps.append(1e3 * (timed[1] - timed[0]) / (new_tokens - half))
    return statistics.median(steps)


DEPLOYMENTS = ("afd_1a1f", "afd_1a1f_2ubatch")
"""AFD 1A1F with one micro-batch per step, and with two (afd.micro_batches)."""


def timing_lines(server: VllmServer, since: int) -> list[dict[str, Any]]:
    """The server's AFD_STEP_TIMING lines logged after byte ``since``."""
    text = server.log_text()[since:]
    return [t for t in map(parse_timing, text.splitlines()) if t is not None]


def mean_parts(lines: list[dict[str, Any]]) -> dict[str, float]:
    """Per-step means over windows (weighted by their steps)."""
    steps = sum(float(t["steps"]) for t in lines)
    keys = {k for t in lines for k in t if k not in ("role", "steps")}
    return {
        k: sum(float(t.get(k, 0.0)) * float(t["steps"]) for t in lines) / steps
        for k in sorted(keys)
    }


def measure_servers(
    model: Path, logs: Path, new_tokens: int, samples: int, extra_args: list[str]
) -> dict[str, Any]:
    """Decode rates of the colocated server and both AFD deployments, one at a
    time, and where each AFD role's step time went (AFD_STEP_TIMING over the
    timed requests). CPU threads as the launch plan gives them: the host's
    CPUs shared by the AFD roles, all of them for the colocated server."""
    cpus = host_cpus()
    per_role = {"OMP_NUM_THREADS": str(cpu_share(cpus, 2))}
    window = max(1, new_tokens // 2)
    out: dict[str, Any] = {"colocated": {}, "ready_s": {}, "timing": {}, "step_ms": {}}
    env = {**CPU_ENV, "AFD_STEP_TIMING": str(window)}
    # Leaving the block stops every server; one that needed SIGKILL or left a
    # process behind raises ServerTeardownError.
    with VllmServers(logs, env=env) as servers:
        baseline = servers.start(
            "colocated",
            model,
            extra_args=extra_args,
            env={"OMP_NUM_THREADS": str(cpus)},
        ).wait_ready()
        out["ready_s"]["colocated"] = baseline.ready_after_s
        for batch in BATCHES:
            out["colocated"][batch] = decode_rate(baseline, batch, new_tokens, samples)
        baseline.stop()
        for name, ubatches in zip(DEPLOYMENTS, (1, 2), strict=True):
            ffn, attention = servers.afd_pair(
                model,
                extra_args,
                env=per_role,
                suffix=f"-{ubatches}",
                micro_batches=ubatches,
            )
            roles = {"ffn": ffn, "attention": attention.wait_ready()}
            out["ready_s"][name] = attention.ready_after_s
            out[name], out["timing"][name], out["step_ms"][name] = {}, {}, {}
            for batch in BATCHES:
                out[name][batch] = decode_rate(attention, batch, new_tokens, samples)
                marks = {r: len(s.log_text()) for r, s in roles.items()}
                out["step_ms"][name][batch] = marginal_step_ms(
                    attention, batch, new_tokens, samples
                )
                out["timing"][name][batch] = {
                    r: mean_parts(timing_lines(s, marks[r])) for r, s in roles.items()
                }
            for server in roles.values():
                server.stop()
    return out


# -- exchange round trip ----------------------------------------------------


TRANSPORTS = ("gloo", "shm")


def _connector(role: str, port: int, transport: str) -> Any:
    from afd_plugin.config import AFDConfig
    from afd_plugin.connectors.cpu.p2p_gloo import P2pGlooAFDConnector

    config = AFDConfig(
        role=role,
        connector="P2pGlooAFDConnector",
        port=port,
        connector_extra_config={"transport": transport},
    )
    return P2pGlooAFDConnector(config, 0)


def _spec(hidden: int) -> Any:
    from afd_plugin.connectors.base import ExchangeSpec, LayerExchange

    return ExchangeSpec(hidden, "bfloat16", "float32", (LayerExchange(0, "moe"),))


def _echo_ffn(port: int, shape: tuple[int, int], repeats: int, transport: str) -> None:
    from afd_plugin.wire import AFDControlPayload

    conn = _connector("ffn", port, transport)
    conn.bind(_spec(shape[1]))
    conn.init_afd_connector()
    conn.update_state_from_dp_metadata(AFDControlPayload(0, (shape[0],), shape[0]))
    for _ in range(repeats):
        hidden, _ = conn.recv_attn_output(0, 0)
        conn.send_ffn_output(hidden, 0, 0)
    conn.close()


def _round_trip(shape: tuple[int, int], repeats: int, transport: str) -> float:
    """Median seconds of one layer's send + receive on ``transport``."""
    import torch

    from afd_plugin.wire import AFDControlPayload

    port = free_port()
    ffn = mp.get_context("spawn").Process(
        target=_echo_ffn, args=(port, shape, repeats, transport), daemon=True
    )
    ffn.start()
    conn = _connector("attention", port, transport)
    conn.bind(_spec(shape[1]))
    conn.init_afd_connector()
    conn.update_state_from_dp_metadata(AFDControlPayload(0, (shape[0],), shape[0]))
    hidden = torch.randn(shape).to(torch.bfloat16)
    trips = []
    for _ in range(repeats):
        started = time.perf_counter()
        conn.send_attn_output(hidden, 0, 0)
        conn.recv_ffn_output(0, 0)
        trips.append(time.perf_counter() - started)
    conn.close()
    ffn.join(30)
    return statistics.median(trips[5:])


def _flag_echo(fd: int, repeats: int) -> None:
    import ctypes
    import mmap

    view = mmap.mmap(fd, 128)
    base = ctypes.addressof(ctypes.c_char.from_buffer(view))
    asked = ctypes.c_uint64.from_address(base)
    answered = ctypes.c_uint64.from_address(base + 64)
    for i in range(1, repeats + 1):
        while asked.value < i:
            pass
        answered.value = i


def hand_off_floor(repeats: int) -> float:
    """Median seconds of the cheapest cross-process round trip there is here:
    one cache-line flag each way between two spinning Python processes, no
    data, no doorbell. Every data path pays at least this."""
    import ctypes
    import mmap
    import os

    fd = os.memfd_create("afd-bench-flag", os.MFD_CLOEXEC)
    os.ftruncate(fd, 128)
    peer = mp.get_context("fork").Process(
        target=_flag_echo, args=(fd, repeats), daemon=True
    )
    peer.start()
    view = mmap.mmap(fd, 128)
    base = ctypes.addressof(ctypes.c_char.from_buffer(view))
    asked = ctypes.c_uint64.from_address(base)
    answered = ctypes.c_uint64.from_address(base + 64)
    trips = []
    for i in range(1, repeats + 1):
        started = time.perf_counter()
        asked.value = i
        while answered.value < i:
            pass
        trips.append(time.perf_counter() - started)
    peer.join(30)
    del asked, answered
    view.close()
    os.close(fd)
    return statistics.median(trips[5:])


def exchange_round_trip(shape: tuple[int, int], repeats: int) -> dict[str, Any]:
    """Median seconds of one layer's send + receive on each data path, and of
    an in-process copy of the same bf16 tensor; each path as a ratio to it."""
    import torch

    hidden = torch.randn(shape).to(torch.bfloat16)
    target = torch.empty_like(hidden)
    copies = []
    for _ in range(repeats):
        started = time.perf_counter()
        target.copy_(hidden)
        copies.append(time.perf_counter() - started)
    copy = statistics.median(copies[5:])
    trips = {t: _round_trip(shape, repeats, t) for t in TRANSPORTS}
    # A round trip is four tensor operations in a row: two sends, each at
    # least one copy into memory the peer sees, and two receives, each at
    # least a tensor made over that memory (zero-copy) or a copy out of it;
    # plus one hand-off each way. That sum is its floor.
    raw = bytearray(hidden.numel() * hidden.element_size())
    views = []
    for _ in range(repeats):
        started = time.perf_counter()
        torch.frombuffer(raw, dtype=torch.bfloat16).view(shape)
        views.append(time.perf_counter() - started)
    receive = min(copy, statistics.median(views[5:]))
    floor = 2 * copy + 2 * receive + hand_off_floor(repeats)
    return {
        **{f"{t}_round_trip_s": v for t, v in trips.items()},
        "in_process_copy_s": copy,
        "floor_s": floor,
        "ratio": {t: v / copy for t, v in trips.items()},
        "floor_ratio": floor / copy,
    }


# -- report -----------------------------------------------------------------


def where_time_goes(served: dict[str, Any]) -> dict[str, Any]:
    """Per decode step, by deployment and batch: the colocated and AFD steps
    (from the decode rates), the client's marginal AFD step, and the attention
    role's parts (AFD_STEP_TIMING), which must add up to the marginal step;
    the FFN role's parts beside them."""
    out: dict[str, Any] = {}
    for name in DEPLOYMENTS:
        out[name] = {}
        for b in BATCHES:
            colocated_ms = 1e3 * b / served["colocated"][b]
            step_ms = 1e3 * b / served[name][b]
            marginal_ms = served["step_ms"][name][b]
            timing = served["timing"][name][b]
            parts = {k: v for k, v in timing["attention"].items() if k != "step_ms"}
            out[name][str(b)] = {
                "colocated_ms_per_step": colocated_ms,
                "afd_ms_per_step": step_ms,
                "afd_marginal_ms_per_step": marginal_ms,
                "attention_parts_ms": parts,
                "parts_sum_ms": sum(parts.values()),
                "parts_sum_over_step": sum(parts.values()) / marginal_ms,
                "ffn_parts_ms": {
                    k: v for k, v in timing["ffn"].items() if k != "step_ms"
                },
                "overlap": overlap(timing["attention"], timing["ffn"]),
            }
    return out


def attribution_table(per_step: dict[str, Any]) -> str:
    """The attribution as a text table (ms per decode step): colocated and
    AFD from the decode rates, "AFD step" the client's marginal step that the
    attention role's parts add up to (``wait`` is its wait for the FFN), the
    FFN role's busy time and the pipeline efficiency max(attention busy, FFN
    busy) / step (``afd_plugin.step_timing.overlap``)."""
    parts = ATTENTION_PARTS
    head = ["deployment", "batch", "colocated", "AFD", "AFD step", *parts, "sum"]
    head += ["sum/step", "FFN busy", "pipeline eff"]
    rows = [head]
    for name, by_batch in per_step.items():
        for b, row in by_batch.items():
            rows.append(
                [
                    name,
                    b,
                    f"{row['colocated_ms_per_step']:.2f}",
                    f"{row['afd_ms_per_step']:.2f}",
                    f"{row['afd_marginal_ms_per_step']:.2f}",
                    *(f"{row['attention_parts_ms'].get(p, 0.0):.2f}" for p in parts),
                    f"{row['parts_sum_ms']:.2f}",
                    f"{row['parts_sum_over_step']:.2f}",
                    f"{row['overlap']['ffn_busy_ms']:.2f}",
                    f"{row['overlap']['pipeline_efficiency']:.2f}",
                ]
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows
    )


def plot(result: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot written"
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    ratios = result["decode"]["ratio"]
    for i, name in enumerate(DEPLOYMENTS):
        left.bar(
            [x + i * 0.4 for x in range(len(BATCHES))],
            [ratios[name][str(b)] for b in BATCHES],
            0.4,
            label=name,
        )
    left.set_xticks([x + 0.2 for x in range(len(BATCHES))], [str(b) for b in BATCHES])
    left.legend()
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set(xlabel="batch", ylabel="AFD / colocated", title="decode tokens/s")
    shapes = list(result["exchange"])
    width = 0.4
    for i, transport in enumerate(TRANSPORTS):
        right.bar(
            [x + i * width for x in range(len(shapes))],
            [result["exchange"][s]["ratio"][transport] for s in shapes],
            width,
            label=transport,
        )
    right.set_xticks([x + width / 2 for x in range(len(shapes))], shapes)
    right.legend()
    right.set_yscale("log")
    right.set(xlabel="tokens x hidden (bf16)", title="round trip / in-process copy")
    right.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return f"plot: {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="qwen3_moe")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument(
        "--samples", type=int, default=5, help="timed requests per batch size"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--plot", type=Path, default=PLOT)
    parser.add_argument(
        "--replot",
        action="store_true",
        help="only draw the plot of the saved results (OUT/cpu_afd.json)",
    )
    parser.add_argument(
        "--exchange-only",
        action="store_true",
        help="measure the exchange round trips only (no vLLM servers)",
    )
    args = parser.parse_args(argv)
    if args.replot:
        saved = json.loads((args.out / "cpu_afd.json").read_text())
        print(plot(saved, args.plot))
        return 0

    model = build_tiny_model(args.arch)
    config = json.loads((model / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    exchange = {
        f"{n}x{h}": exchange_round_trip((n, h), args.repeats)
        for n, h in EXCHANGE_SHAPES
    }
    if args.exchange_only:
        print(json.dumps(exchange, indent=2))
        return 0
    extra_args = ["--dtype", "float32", "--dbo-decode-token-threshold", "2"]
    if args.arch == "deepseek_v2":
        extra_args += ["--attention-backend", "CPU_MLA"]
    with tempfile.TemporaryDirectory(prefix="cpu-afd-bench-") as logs:
        served = measure_servers(
            model, Path(logs), args.new_tokens, args.samples, extra_args
        )
    ratio = {
        name: {str(b): served[name][b] / served["colocated"][b] for b in BATCHES}
        for name in DEPLOYMENTS
    }
    per_step = where_time_goes(served)
    result = {
        "what": "AFD 1A1F (shared-memory data path; one and two micro-batches "
        "per step) vs colocated vLLM, same machine, same run",
        "model": model.name,  # the cache entry; its spec hash names the build
        "arch": args.arch,
        "layers": layers,
        "hidden_size": hidden,
        "cpus": host_cpus(),
        "new_tokens_per_sequence": args.new_tokens,
        "decode": {
            "colocated_tokens_per_s": {
                str(b): v for b, v in served["colocated"].items()
            },
            **{
                f"{name}_tokens_per_s": {str(b): v for b, v in served[name].items()}
                for name in DEPLOYMENTS
            },
            "ratio": ratio,
        },
        "server_ready_s": served["ready_s"],
        "exchange": exchange,
        "per_decode_step": per_step,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu_afd.json").write_text(json.dumps(result, indent=2) + "\n")
    summary = {
        "decode_ratio": ratio,
        "exchange_ratio": {k: v["ratio"] for k, v in exchange.items()},
        "exchange_floor_ratio": {k: v["floor_ratio"] for k, v in exchange.items()},
    }
    print(json.dumps(summary, indent=2))
    print(attribution_table(per_step))
    print(plot(result, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
