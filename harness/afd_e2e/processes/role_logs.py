# SPDX-License-Identifier: Apache-2.0
"""A role process's log file as the harness reads it: its tail, quoted in
error messages, and the stream that prints it as it grows (``--stream-logs``).

The process writes the file itself (stdout and stderr); nothing here stands
between the two, so a slow terminal never slows a server, and the file holds
every line whether or not it is streamed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from afd_e2e.processes.terminal import say

__all__ = [
    "LOG_TAIL_LINES",
    "NOT_READY_TAIL_LINES",
    "LogStream",
    "quote_tail",
    "tail_lines",
]

LOG_TAIL_LINES = 50
"""Lines of a role's log quoted when it dies."""
NOT_READY_TAIL_LINES = 20
"""Lines of each not-ready role's log quoted when the readiness deadline passes."""


def tail_lines(path: Path, count: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``count`` lines of a log file (empty when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * 1024))
            data = handle.read()
    except FileNotFoundError:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines[-count:] if count else []


def quote_tail(lines: list[str]) -> str:
    """Log lines as an error message quotes them, each under ``  | ``."""
    return "\n".join(f"  | {line}" for line in lines) if lines else "  | (log empty)"


class LogStream(threading.Thread):
    """Follows one role's log file from byte ``offset`` (where this start of
    the process began writing) and prints each line on stderr with a
    ``[role:rank]`` prefix; :meth:`stop` prints what is left and ends it."""

    def __init__(self, path: Path, name: str, offset: int = 0) -> None:
        super().__init__(name=f"afd-e2e-log-{name}", daemon=True)
        self.path, self.prefix, self.offset = path, f"[{name}] ", offset
        self.halt = threading.Event()

    def run(self) -> None:
        pending = b""
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            while True:
                chunk = handle.read(64 * 1024)
                if chunk:
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        say(self.prefix + line.decode(errors="replace"))
                elif self.halt.is_set():
                    break
                else:
                    self.halt.wait(0.1)
        if pending:
            say(self.prefix + pending.decode(errors="replace"))

    def stop(self, timeout_s: float = 2.0) -> None:
        """Print the rest of the file (the process is gone) and end."""
        self.halt.set()
        self.join(timeout=timeout_s)
