# SPDX-License-Identifier: Apache-2.0
"""Overhead of the harness process manager against bare Popen/poll/terminate/wait.

Both start the same N stand-in servers (idle_server.py) in the same run,
interleaved; medians.
Usage: python benchmarks/harness_overhead.py [--servers N] [--runs R] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.readiness import tcp_probe
from afd_e2e.processes.role_process import ProcessSpec

SERVER = Path(__file__).with_name("idle_server.py")
POLL_S = 0.01  # both sides poll at the same pace


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def argv(port: int) -> list[str]:
    return [sys.executable, str(SERVER), "--port", str(port)]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def bare(count: int, run_dir: Path) -> tuple[float, float]:
    ports = free_ports(count)
    began = time.perf_counter()
    procs = []
    for i, port in enumerate(ports):
        with open(run_dir / f"bare-{i}.log", "ab") as log:
            procs.append(
                subprocess.Popen(
                    argv(port),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
    pending = set(ports)
    while pending:
        pending = {port for port in pending if not answers(port)}
        if pending:
            time.sleep(POLL_S)
    ready = time.perf_counter() - began
    stopping = time.perf_counter()
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait()
    return ready, time.perf_counter() - stopping


def managed(count: int, run_dir: Path, stream_logs: bool) -> tuple[float, float]:
    ports = free_ports(count)
    manager = ProcessManager(
        f"bench-{uuid.uuid4().hex[:8]}",
        run_dir,
        scenario_id="bench",
        stream_logs=stream_logs,
        announce=False,
        progress_every_s=None,
    )
    began = time.perf_counter()
    for i, port in enumerate(ports):
        manager.start(ProcessSpec("ffn", i, argv(port)))
    probes = {f"ffn:{i}": tcp_probe("127.0.0.1", port) for i, port in enumerate(ports)}
    manager.wait_ready(probes, timeout_s=60, poll_s=POLL_S)
    ready = time.perf_counter() - began
    stopping = time.perf_counter()
    record = manager.stop()
    if not record.ok:
        raise SystemExit(f"teardown failed: {record.problems()}")
    return ready, time.perf_counter() - stopping


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--stream-logs", action="store_true", help="the manager streams the logs"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {
        name: [] for name in ("bare ready", "bare reap", "mgr ready", "mgr reap")
    }
    with tempfile.TemporaryDirectory(prefix="afd-bench-") as tmp:
        for run in range(args.runs):  # interleaved: noise hits both alike
            run_dir = Path(tmp) / str(run)
            run_dir.mkdir()
            ready, reap = bare(args.servers, run_dir)
            samples["bare ready"].append(ready)
            samples["bare reap"].append(reap)
            ready, reap = managed(args.servers, run_dir, args.stream_logs)
            samples["mgr ready"].append(ready)
            samples["mgr reap"].append(reap)
    med = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{args.servers} stand-in servers, {args.runs} runs, medians")
    print(f"{'phase':22} {'bare ms':>9} {'manager ms':>11} {'ratio':>7}")
    results = {}
    for phase, label in (
        ("ready", "launch -> all ready"),
        ("reap", "stop -> all reaped"),
    ):
        base, mine = med[f"bare {phase}"], med[f"mgr {phase}"]
        results[phase] = {"bare_s": base, "manager_s": mine, "ratio": mine / base}
        print(f"{label:22} {base * 1000:9.1f} {mine * 1000:11.1f} {mine / base:7.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"servers": args.servers, "runs": args.runs, **results}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
