# SPDX-License-Identifier: Apache-2.0
"""The shared-memory ring of the CPU data path, without torch: bytes arrive in
order and intact through a ring smaller than the message, a sleeping end is
woken by its doorbell, a vanished peer and a silent one are reported, and the
memory is anonymous (nothing in /dev/shm, before or after).
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from afd_plugin.connectors.cpu.shm_ring import (
    Doorbell,
    Ring,
    RingClosed,
    RingTimeout,
    create_memfd,
)


def buffer(data: bytes | int) -> tuple[bytearray, int]:
    raw = bytearray(data) if isinstance(data, bytes) else bytearray(data)
    return raw, ctypes.addressof((ctypes.c_char * len(raw)).from_buffer(raw))


def pair(capacity: int, spin_s: float = 0.0, timeout_s: float = 5.0):
    """A producer end and a consumer end of one ring, as two processes hold them."""
    fd = create_memfd("afd-test", capacity)
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    producer_bell, consumer_bell = Doorbell(left), Doorbell(right)
    producer = Ring(fd, capacity, producer_bell, spin_s=spin_s, timeout_s=timeout_s)
    consumer = Ring(fd, capacity, consumer_bell, spin_s=spin_s, timeout_s=timeout_s)
    os.close(fd)
    return producer, consumer, producer_bell, consumer_bell


def test_messages_larger_than_the_ring_arrive_in_order() -> None:
    producer, consumer, *_ = pair(capacity=4096)
    messages = [os.urandom(n) for n in (1, 4095, 4096, 10_000, 3)]
    received: list[bytes] = []

    def consume() -> None:
        for message in messages:
            out, address = buffer(len(message))
            consumer.read(address, len(message))
            received.append(bytes(out))

    thread = threading.Thread(target=consume)
    thread.start()
    for message in messages:
        data, address = buffer(message)
        producer.write(address, len(message))
    thread.join(10)
    assert received == messages


def test_a_sleeping_consumer_is_woken_by_the_doorbell() -> None:
    producer, consumer, *_ = pair(capacity=4096, spin_s=0.0)
    got: list[float] = []

    def consume() -> None:
        out, address = buffer(8)
        consumer.read(address, 8)
        got.append(time.monotonic())

    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(0.2)  # the consumer is asleep on its doorbell by now
    sent = time.monotonic()
    data, address = buffer(b"12345678")
    producer.write(address, 8)
    thread.join(5)
    assert got and got[0] - sent < 0.1


def test_a_waiting_consumer_spins_first_but_an_idle_one_sleeps_at_once() -> None:
    """A layer's wait spins (its answer is near); an idle wait (the next
    step) leaves the core at once and still wakes on the doorbell."""
    producer, consumer, *_ = pair(capacity=64, spin_s=10.0)
    cpu: dict[str, float] = {}

    def consume(name: str, idle: bool) -> None:
        out, address = buffer(1)
        started = time.thread_time()
        consumer.read(address, 1, idle)
        cpu[name] = time.thread_time() - started

    for name, idle in (("idle", True), ("layer", False)):
        thread = threading.Thread(target=consume, args=(name, idle))
        thread.start()
        time.sleep(0.5)
        data, address = buffer(b"x")
        producer.write(address, 1)
        thread.join(5)
        assert not thread.is_alive()
    assert cpu["idle"] < 0.05
    assert cpu["layer"] > 0.1  # spun through most of the half second


def test_a_peer_that_vanished_is_reported_at_once() -> None:
    producer, consumer, producer_bell, _ = pair(capacity=4096, timeout_s=30.0)
    producer_bell.close()  # the producer's process is gone: its socket closes
    out, address = buffer(8)
    started = time.monotonic()
    with pytest.raises(RingClosed, match="closed by the peer"):
        consumer.read(address, 8)
    assert time.monotonic() - started < 1.0


def test_a_silent_peer_times_out() -> None:
    _, consumer, *_ = pair(capacity=4096, timeout_s=0.3)
    out, address = buffer(8)
    with pytest.raises(RingTimeout, match="within 0.3s"):
        consumer.read(address, 8)


def test_the_memory_has_no_name_to_leak() -> None:
    before = set(os.listdir("/dev/shm")) if Path("/dev/shm").is_dir() else set()
    producer, consumer, producer_bell, consumer_bell = pair(capacity=1 << 20)
    during = set(os.listdir("/dev/shm")) if Path("/dev/shm").is_dir() else set()
    for end in (producer, consumer, producer_bell, consumer_bell):
        end.close()
    producer.close()  # idempotent
    assert during == before
