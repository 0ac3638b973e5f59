# SPDX-License-Identifier: Apache-2.0
"""The ports the harness gives servers lie outside the kernel's ephemeral
range, so a process binding port 0 (vLLM's own ZMQ ports) cannot take one
before its server binds it; they are free when chosen."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from afd_e2e.launch import ports
from afd_e2e.launch.plan import free_port


def test_plan_ports_are_never_ones_the_kernel_hands_out() -> None:
    low, high = ports.ephemeral_range()
    chosen = {free_port() for _ in range(50)}
    assert all(not low <= p <= high for p in chosen), sorted(chosen)
    # nor ones an attached Ray cluster's or the local cluster's workers take
    assert all(
        p > ports.RANGE_BLOCK[1] > ports.RAY_DEFAULT_WORKER_PORTS[1] for p in chosen
    )
    # What a process binding port 0 gets is inside the range: the two never meet.
    assert low <= ports.os_port("127.0.0.1") <= high


def test_a_port_in_use_is_never_chosen() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        draws = {
            ports.pick_free_port("127.0.0.1", (busy, busy), random.Random(0))
            for _ in range(5)
        }
    assert busy not in draws


def test_the_band_is_the_widest_outside_the_ephemeral_range() -> None:
    assert ports.outside_band((32768, 60999)) == (21000, 32767)
    assert ports.outside_band((10000, 40000)) == (40001, 65535)
    # A range covering (nearly) everything leaves the OS's own pick.
    assert ports.outside_band((1024, 65000)) is None


def test_the_kernel_range_is_read_and_a_bad_file_falls_back(tmp_path: Path) -> None:
    good = tmp_path / "range"
    good.write_text("20000\t30000\n")
    assert ports.ephemeral_range(good) == (20000, 30000)
    bad = tmp_path / "bad"
    bad.write_text("garbage")
    assert ports.ephemeral_range(bad) == ports.LINUX_DEFAULT_EPHEMERAL
    assert ports.ephemeral_range(tmp_path / "absent") == ports.LINUX_DEFAULT_EPHEMERAL
