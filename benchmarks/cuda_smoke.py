# SPDX-License-Identifier: Apache-2.0
"""CUDA smoke run of the AFD runtime on ONE GPU (both roles on the same device):
the FFN graph cache on CUDA graphs, the connector's host transport serving a
two-micro-batch step through the FFN daemon (warm-up, capture, replay), and
token parity of an eager AFD pair against colocated vLLM on a tiny model.

Usage: python benchmarks/cuda_smoke.py [--out benchmarks/results] [--skip-servers]
Needs vllm==0.32.0 (CUDA build) and this repository installed in the running
interpreter; downloads nothing. Writes cuda_smoke.json under --out.

Both roles share one GPU, so the data path is the connector's ``host``
transport (NCCL refuses two ranks on one device). A host transport cannot be
captured into the attention side's graphs, so the served vLLM pair runs eager;
FFN graph capture and replay run through the real daemon and graph cache with
this script playing the attention side.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from afd_e2e.launch.plan import free_port
from afd_e2e.processes.servers import VllmServers

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HIDDEN = 64
LAYERS = (0, 1, 2)
PROMPTS = [
    "Janet has 3 apples and buys 5 more.",
    "The capital of France is",
    "1, 2, 3, 4,",
    "Once upon a time",
]


def layer_fn(layer: int, hidden: Any, _: Any) -> Any:
    import torch

    return hidden * (layer + 2) + torch.tanh(hidden)


# -- 1. the graph cache on CUDA graphs ---------------------------------------


def check_graph_cache() -> dict[str, Any]:
    import torch

    from afd_plugin.runtime.ffn_graphs import FFNGraphCache
    from afd_plugin.runtime.gpu.graphs import CudaGraphBackend

    device = torch.device("cuda", 0)
    weight = torch.randn(HIDDEN, HIDDEN, device=device)
    cache = FFNGraphCache(CudaGraphBackend(device))
    static = {"hidden": torch.zeros(8, HIDDEN, device=device)}
    compute = lambda x: torch.relu(x["hidden"] @ weight)  # noqa: E731
    compute(static)  # warm-up before capture
    torch.cuda.synchronize()
    cache.capture((0, 1, 8), 0, static, compute)
    diffs = []
    for _ in range(3):
        data = torch.randn(8, HIDDEN, device=device)
        out = cache.replay((0, 1, 8), 0, lambda x, d=data: x["hidden"].copy_(d))
        diffs.append(float((out - torch.relu(data @ weight)).abs().max()))
    return {"ok": max(diffs) < 1e-3, "max_abs_diff": max(diffs)}


# -- 2. host transport + daemon + graph cache, two processes, one GPU --------


def _spec(stages: int) -> Any:
    from afd_plugin.connectors.base import ExchangeSpec, LayerExchange

    layers = tuple(LayerExchange(i, "dense") for i in LAYERS)
    return ExchangeSpec(HIDDEN, "float32", "float32", layers, stages)


def _connector(role: str, port: int, stages: int) -> Any:
    from afd_plugin.config import AFDConfig
    from afd_plugin.connectors.gpu.p2p_nccl import P2pNcclAFDConnector

    config = AFDConfig(
        role=role,
        connector="P2pNcclAFDConnector",
        port=port,
        connector_extra_config={"transport": "host", "peer_timeout_s": 120.0},
    )
    conn = P2pNcclAFDConnector(config, 0)
    conn.bind(_spec(stages))
    return conn


def _ffn_main(port: int, stages: int, steps: int, queue: Any) -> None:
    import torch

    from afd_plugin.runtime.ffn_daemon import FFNDaemon
    from afd_plugin.runtime.ffn_graphs import FFNGraphCache
    from afd_plugin.runtime.ffn_serve import serve_ffn_step
    from afd_plugin.runtime.gpu.graphs import CudaGraphBackend

    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    conn = _connector("ffn", port, stages)
    graphs = FFNGraphCache(CudaGraphBackend(device))
    try:
        conn.init_afd_connector()

        def serve(payloads: Any, branch: Any) -> None:
            with torch.inference_mode():
                serve_ffn_step(conn, layer_fn, LAYERS, payloads, branch, graphs, device)

        daemon = FFNDaemon(conn, serve, lambda _: None, graphs=graphs)
        branches = [daemon.run_once().value for _ in range(steps)]
        queue.put(
            {"branches": branches, "keys": [list(k) for k in graphs.captured_keys()]}
        )
    except BaseException:  # reported to the parent
        queue.put({"error": traceback.format_exc()})
    finally:
        conn.close()


def check_host_daemon(stages: int) -> dict[str, Any]:
    import torch

    from afd_plugin.runtime.ffn_schedule import exchange_schedule
    from afd_plugin.step_protocol import stage_payloads

    torch.cuda.set_device(0)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    plan = [("eager", 5), ("warmup", 8), ("capture", 8)] + [("replay", 8)] * 3
    ffn = ctx.Process(target=_ffn_main, args=(port, stages, len(plan), queue))
    ffn.start()
    conn = _connector("attention", port, stages)
    conn.init_afd_connector()
    diffs: dict[str, float] = {}
    try:
        for index, (kind, rows) in enumerate(plan):
            sizes = [rows] * stages
            graph = kind in ("capture", "replay")
            payloads = stage_payloads(
                [(n,) for n in sizes], kind, stages, sizes if graph else None
            )
            for payload in payloads:
                conn.control_plane.send_dp_metadata_list(payload)
            if kind == "capture":
                continue  # the attention side records a graph: no data moves
            x = {s: torch.randn(rows, HIDDEN, device="cuda") for s in range(stages)}
            expected = dict(x)
            # Attention order mirrors the FFN schedule (recv <-> send).
            for op in exchange_schedule(LAYERS, tuple(range(stages))):
                if op.kind == "recv":
                    conn.send_attn_output(x[op.stage], op.layer, op.stage)
                else:
                    x[op.stage] = conn.recv_ffn_output(op.layer, op.stage)
                    expected[op.stage] = layer_fn(op.layer, expected[op.stage], None)
            diffs[f"{index}:{kind}"] = max(
                float((x[s] - expected[s]).abs().max()) for s in range(stages)
            )
    finally:
        conn.close()
    reply = queue.get(timeout=120)
    ffn.join(60)
    ok = "error" not in reply and max(diffs.values()) < 1e-3
    ok = ok and reply.get("branches", [])[2:4] == ["capture", "replay"]
    return {"ok": ok, "stages": stages, "max_abs_diff": diffs, **reply}


# -- 3. token parity of an eager AFD pair on one GPU -------------------------


CUDA_ARGS = ("--max-model-len", "512", "--max-num-seqs", "8", "--seed", "0")


def check_parity(logs: Path) -> dict[str, Any]:
    from afd_e2e.tiny_model import build_tiny_model

    model = build_tiny_model("deepseek_v2")
    common = ["--enforce-eager", "--gpu-memory-utilization", "0.2"]
    host = {"transport": "host"}
    with VllmServers(logs, env={}, base_args=CUDA_ARGS) as servers:
        baseline = servers.start("colocated", model, extra_args=common)
        expected = baseline.wait_ready(300).complete_each(PROMPTS)
        baseline.stop()
        ffn, attention = servers.afd_pair(
            model,
            args=common,
            connector="P2pNcclAFDConnector",
            connector_extra_config=host,
        )
        got = attention.wait_ready(300).complete_each(PROMPTS)
    same = [a == b for a, b in zip(expected, got, strict=True)]
    return {"ok": all(same), "same": same, "colocated": expected, "afd": got}


def run(name: str, check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    started = time.monotonic()
    try:
        result = check()
    except BaseException:  # every check reports, the next one still runs
        result = {"ok": False, "error": traceback.format_exc()}
    result["seconds"] = round(time.monotonic() - started, 1)
    print(f"{'PASS' if result['ok'] else 'FAIL'} {name} ({result['seconds']}s)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--skip-servers", action="store_true")
    args = parser.parse_args(argv)
    import torch
    import vllm

    result: dict[str, Any] = {
        "what": "AFD CUDA runtime smoke, both roles on one GPU (host transport)",
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "checks": {},
    }
    checks = result["checks"]
    checks["graph_cache"] = run("graph_cache", check_graph_cache)
    checks["host_daemon_1_stage"] = run(
        "host_daemon_1_stage", lambda: check_host_daemon(1)
    )
    checks["host_daemon_2_stages"] = run(
        "host_daemon_2_stages", lambda: check_host_daemon(2)
    )
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_servers:
        logs = Path(tempfile.mkdtemp(prefix="afd-cuda-smoke-", dir=args.out))
        checks["parity_eager_1a1f"] = run(
            "parity_eager_1a1f", lambda: check_parity(logs)
        )
        result["server_logs"] = logs.name
    (args.out / "cuda_smoke.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(c["ok"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
