# SPDX-License-Identifier: Apache-2.0
"""Ports the harness gives its servers: free when chosen, and outside the
range the kernel hands out on its own.

A port found by binding port 0 lies in the kernel's ephemeral range. Once the
probe socket closes, any process that binds port 0 (vLLM picks its ZMQ and
data-parallel ports that way) or connects may receive it before the server it
was meant for binds it, and that server then dies with "Address already in
use" half-way through its start-up. The kernel never hands out a port below
the ephemeral range, so there only another deliberate choice can take it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
RAY_DEFAULT_WORKER_PORTS = (10002, 19999)
"""Ray's own default ``--min-worker-port``/``--max-worker-port``: an attached
cluster's workers may take any of these at any time."""
RANGE_BLOCK = (20000, 20999)
"""Ports the harness hands out only as whole ranges, never singly: the worker
port ranges of the local Ray cluster's nodes (``engines/ray_cluster.py``)."""
LOWEST_PORT = RANGE_BLOCK[1] + 1
"""Single picks start here: below lie well-known service ports, Ray's default
worker ports and :data:`RANGE_BLOCK`."""
MIN_BAND = 1000
"""A band narrower than this is not worth choosing from at random."""
TRIES = 200


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where unreadable)."""
    try:
        low, high = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        return LINUX_DEFAULT_EPHEMERAL
    return low, high


def outside_band(ephemeral: tuple[int, int]) -> tuple[int, int] | None:
    """The widest port band outside ``ephemeral`` (and above the service
    ports), or None where the ephemeral range leaves no useful band."""
    low, high = ephemeral
    bands = [(LOWEST_PORT, low - 1), (high + 1, 65535)]
    wide = [b for b in bands if b[1] - b[0] + 1 >= MIN_BAND]
    return max(wide, key=lambda b: b[1] - b[0]) if wide else None


def _bindable(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` now (no SO_REUSEADDR, so a
    port still in TIME_WAIT counts as taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def os_port(host: str) -> int:
    """A port the OS picks as free on ``host`` (in the ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pick_free_port(
    host: str,
    band: tuple[int, int] | None = None,
    rng: random.Random | None = None,
) -> int:
    """A port free on ``host`` now, from ``band`` (default: outside this
    machine's ephemeral range); the OS's pick where no band is left."""
    band = outside_band(ephemeral_range()) if band is None else band
    if band is not None:
        draw = rng or random.SystemRandom()
        for _ in range(TRIES):
            port = draw.randint(*band)
            if _bindable(host, port):
                return port
    return os_port(host)
