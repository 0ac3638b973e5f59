# SPDX-License-Identifier: Apache-2.0
"""Decode throughput of a 1A1F AFD deployment on the CPU as a ratio to
colocated vLLM, and the per-layer exchange round trip of each CPU data path
(gloo, shared memory) as a ratio to an in-process copy of the same tensor; all
measured in the same run.

Usage: python benchmarks/cpu_afd.py [--arch deepseek_v2] [--new-tokens 32]
       python benchmarks/cpu_afd.py --exchange-only   # the round trips alone
Writes benchmarks/results/cpu_afd.json and, with matplotlib, cpu_afd.png.
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

from afd_e2e.launch import free_port
from afd_e2e.servers import VllmServer, VllmServers
from afd_e2e.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]

BATCHES = (1, 8, 32)
EXCHANGE_SHAPES = ((1, 64), (8, 64), (32, 64), (8, 2048), (64, 7168))
RESULTS = ROOT / "benchmarks" / "results"


# -- decode throughput ------------------------------------------------------


def decode_rate(server: VllmServer, batch: int, new_tokens: int, samples: int) -> float:
    """Completion tokens per second of one batched greedy request; the median
    of ``samples`` requests (the machine is shared and noisy)."""
    prompts = [f"Janet has {i} apples and buys {i + 3} more." for i in range(batch)]
    server.complete(prompts[:1], max_tokens=2)  # warm-up
    rates = []
    for _ in range(samples):
        started = time.perf_counter()
        tokens = server.complete(prompts, max_tokens=new_tokens, timeout_s=600)
        elapsed = time.perf_counter() - started
        rates.append(sum(len(t) for t in tokens) / elapsed)
    return statistics.median(rates)


def measure_servers(
    model: Path, logs: Path, new_tokens: int, samples: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"colocated": {}, "afd_1a1f": {}, "ready_s": {}}
    # Leaving the block stops every server; one that needed SIGKILL or left a
    # process behind raises ServerTeardownError.
    with VllmServers(logs) as servers:
        baseline = servers.start("colocated", model).wait_ready()
        out["ready_s"]["colocated"] = baseline.ready_after_s
        for batch in BATCHES:
            out["colocated"][batch] = decode_rate(baseline, batch, new_tokens, samples)
        baseline.stop()
        ffn, attention = servers.afd_pair(model)
        attention.wait_ready()
        out["ready_s"]["afd_attention"] = attention.ready_after_s
        for batch in BATCHES:
            out["afd_1a1f"][batch] = decode_rate(attention, batch, new_tokens, samples)
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
    return {
        **{f"{t}_round_trip_s": v for t, v in trips.items()},
        "in_process_copy_s": copy,
        "ratio": {t: v / copy for t, v in trips.items()},
    }


# -- report -----------------------------------------------------------------


def where_time_goes(
    served: dict[str, Any], layers: int, step_exchange_s: dict[int, float]
) -> dict[str, dict[str, float]]:
    """Per decode step: colocated and AFD milliseconds, the difference, and
    how much of it ``layers`` exchange round trips of that batch explain."""
    out = {}
    for b in BATCHES:
        colocated_ms = 1e3 * b / served["colocated"][b]
        afd_ms = 1e3 * b / served["afd_1a1f"][b]
        exchange_ms = 1e3 * layers * step_exchange_s[b]
        out[str(b)] = {
            "colocated_ms_per_step": colocated_ms,
            "afd_ms_per_step": afd_ms,
            "extra_ms_per_step": afd_ms - colocated_ms,
            "exchange_ms_per_step": exchange_ms,
            "exchange_share_of_extra": exchange_ms / max(afd_ms - colocated_ms, 1e-9),
        }
    return out


def plot(result: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot written"
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    ratios = result["decode"]["ratio"]
    left.bar([str(b) for b in BATCHES], [ratios[str(b)] for b in BATCHES])
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
    parser.add_argument("--arch", default="deepseek_v2")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument(
        "--samples", type=int, default=3, help="timed requests per batch size"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--exchange-only",
        action="store_true",
        help="measure the exchange round trips only (no vLLM servers)",
    )
    args = parser.parse_args(argv)

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
    # The model's own decode-step shapes (one token per sequence).
    # The deployment below runs transport 'auto': shared memory on one machine.
    step_exchange = {
        b: exchange_round_trip((b, hidden), args.repeats)["shm_round_trip_s"]
        for b in BATCHES
    }
    with tempfile.TemporaryDirectory(prefix="cpu-afd-bench-") as logs:
        served = measure_servers(model, Path(logs), args.new_tokens, args.samples)
    ratio = {str(b): served["afd_1a1f"][b] / served["colocated"][b] for b in BATCHES}
    result = {
        "what": "AFD 1A1F (shared-memory data path) vs colocated vLLM, same "
        "machine, same run",
        "model": model.name,  # the cache entry; its spec hash names the build
        "arch": args.arch,
        "new_tokens_per_sequence": args.new_tokens,
        "decode": {
            "colocated_tokens_per_s": {
                str(b): v for b, v in served["colocated"].items()
            },
            "afd_tokens_per_s": {str(b): v for b, v in served["afd_1a1f"].items()},
            "ratio": ratio,
        },
        "server_ready_s": served["ready_s"],
        "exchange": exchange,
        "per_decode_step": where_time_goes(served, layers, step_exchange),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu_afd.json").write_text(json.dumps(result, indent=2) + "\n")
    summary = {
        "decode_ratio": ratio,
        "exchange_ratio": {k: v["ratio"] for k, v in exchange.items()},
        "per_decode_step": result["per_decode_step"],
    }
    print(json.dumps(summary, indent=2))
    print(plot(result, args.out / "cpu_afd.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
