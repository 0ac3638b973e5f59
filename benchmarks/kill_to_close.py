# SPDX-License-Identifier: Apache-2.0
"""How long after a SIGKILL a process's sockets close, by its memory size.

A failover begins when the attention rank sees its FFN rank's doorbell
socket close. The kernel closes a killed process's files only after it has
torn down its address space, so the larger the process, the later its peer
learns of the death: this measures that delay for a child holding one end
of a socket pair and ``--sizes-mib`` of touched memory (the baseline is the
smallest size, measured in the same run). ``benchmarks/failover.py``
attributes the detection part of a failover's stall to it.

Usage: python benchmarks/kill_to_close.py [--sizes-mib 10,1000,3000] [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import sys
import time

PAGE = 4096


def kill_to_close_ms(mib: int) -> float:
    """SIGKILL a child holding ``mib`` MiB of touched memory and one end of a
    socket pair; milliseconds until the other end reads end-of-file."""
    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child: touch its memory, say so, wait to be killed
        mine.close()
        memory = bytearray(mib * 1024 * 1024)
        for offset in range(0, len(memory), PAGE):
            memory[offset] = 1
        theirs.send(b"r")
        time.sleep(600)
        os._exit(0)
    theirs.close()
    try:
        mine.recv(1)
        started = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        mine.recv(1)  # end-of-file once the kernel closed the child's end
        return (time.monotonic() - started) * 1e3
    finally:
        os.waitpid(pid, 0)
        mine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="10,1000,3000")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    medians = {
        mib: statistics.median(kill_to_close_ms(mib) for _ in range(args.trials))
        for mib in sizes
    }
    base = medians[sizes[0]]
    print("| memory (MiB) | SIGKILL to socket closed (ms, median) | ratio |")
    print("| --- | --- | --- |")
    for mib, ms in medians.items():
        print(f"| {mib} | {ms:.1f} | {ms / base:.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
