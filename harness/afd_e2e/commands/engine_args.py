# SPDX-License-Identifier: Apache-2.0
"""``--engine`` and its options, shared by the commands that run servers, and
the one place that turns them into an engine."""

from __future__ import annotations

import argparse
from pathlib import Path

from afd_e2e.engines import ENGINES
from afd_e2e.engines.base import Engine, EngineError
from afd_e2e.engines.ray_cluster import DEFAULT_STATE_DIR


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="where the servers run: local subprocesses (default), or one Ray "
        "actor per server on its placement node",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="with --engine ray: the cluster to attach to (default: the one "
        "`afd-e2e cluster up` started)",
    )
    parser.add_argument(
        "--cluster-state",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help=f"where `afd-e2e cluster up` recorded its cluster (default: "
        f"{DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--node-network",
        choices=("loopback", "netns"),
        default="loopback",
        help="with --engine local and a placement: every node on 127.0.0.1 "
        "(default), or one network namespace per node (needs root)",
    )


def open_engine(args: argparse.Namespace) -> Engine:
    """The engine the flags name; raises ``EngineError`` (nothing started)."""
    if args.engine == "ray":
        if args.node_network != "loopback":
            raise EngineError("--node-network is for --engine local")
        try:
            from afd_e2e.engines.ray_engine import RayEngine
        except ImportError:
            raise EngineError(
                "--engine ray needs Ray: install the ray extra "
                "(pip install -e '.[ray]') or use tox -e ray; nothing was started"
            ) from None
        return RayEngine(args.ray_address, args.cluster_state)
    if args.ray_address is not None:
        raise EngineError("--ray-address is for --engine ray")
    from afd_e2e.engines.local import LocalEngine

    return LocalEngine(args.node_network)
