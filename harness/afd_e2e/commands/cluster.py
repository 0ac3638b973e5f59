# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e cluster up|down|status``: a local Ray cluster (a head plus one
worker node per logical node name) for ``afd-e2e run --engine ray``."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from afd_e2e.engines.ray_cluster import DEFAULT_STATE_DIR

DEFAULT_NODES = "node-a,node-b"


def _names(text: str) -> list[str]:
    from afd_e2e.define.scenario import NODE_NAME

    names = [part.strip() for part in text.split(",") if part.strip()]
    bad = [n for n in names if not re.match(NODE_NAME, n)]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected distinct node names (DNS labels) such as {DEFAULT_NODES}, "
            f"got {text!r}"
        )
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument(
        "--nodes",
        type=_names,
        default=_names(DEFAULT_NODES),
        help=f"up: one worker per logical node name (default: {DEFAULT_NODES}), "
        "each offering the resource afd-node-<name>",
    )
    parser.add_argument(
        "--cpus-per-node", type=int, default=2, help="up: CPUs each worker offers"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help=f"where the cluster is recorded (default: {DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--grace-s",
        type=float,
        default=30.0,
        help="down: SIGTERM grace before anything left is SIGKILLed (fails)",
    )


def run(args: argparse.Namespace) -> int:
    from afd_e2e.engines import ray_cluster

    try:
        if args.action == "up":
            state = ray_cluster.up(
                args.nodes, args.state_dir, cpus_per_node=args.cpus_per_node
            )
            nodes = ", ".join(f"{n} (pid {p})" for n, p in state.workers.items())
            print(
                f"Ray cluster up at {state.address}: head (pid {state.head_pid}), "
                f"{nodes}; logs in {state.log_dir}"
            )
            print(
                f"run: afd-e2e run ID --engine ray   (or --ray-address {state.address})"
            )
            return 0
        if args.action == "status":
            state = ray_cluster.ClusterState.load(args.state_dir)
            if state is None:
                print(f"no cluster recorded in {args.state_dir}")
                return 1
            left = ray_cluster.leftovers(state.marker)
            print(f"Ray cluster at {state.address}: {len(left)} process(es) alive")
            return 0
        report = ray_cluster.down(args.state_dir, grace_s=args.grace_s)
    except ray_cluster.ClusterError as exc:
        print(f"afd-e2e cluster {args.action}: {exc}", file=sys.stderr)
        return 1
    print(
        f"Ray cluster down in {report.duration_s:.1f} s: signalled "
        + (", ".join(report.signalled) or "nothing (already gone)")
    )
    if not report.ok:
        print("needed SIGKILL after the grace (fails):", file=sys.stderr)
        for line in report.killed:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0
