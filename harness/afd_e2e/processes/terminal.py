# SPDX-License-Identifier: Apache-2.0
"""The harness's own lines on the terminal (stderr): whole lines, one at a
time (:func:`say`), the one status line a wait keeps up to date
(:class:`StatusLine`), and what a start of servers says with them.

On a terminal the status line is rewritten in place (``\\r``); a line said
meanwhile takes it off first and draws it again below. Anywhere else (a pipe,
a file, a CI log) it is a line of its own, at most one per ``every_s``.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Collection, Mapping
from typing import TextIO

_OUTPUT_LOCK = threading.RLock()  # re-entrant: a signal handler may print
_drawn: StatusLine | None = None
"""The status line drawn in place now, if any."""


def say(line: str) -> None:
    """One line to stderr, never interleaved with another; an in-place status
    line on it is taken off first and drawn again after it."""
    with _OUTPUT_LOCK:
        status = _drawn
        if status is not None:
            status._erase()
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        if status is not None:
            status._draw()


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (a wrapped line cannot be redrawn)."""
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


class StatusLine:
    """A line that says how a wait is going, updated as it goes.

    ``in_place`` (default: whether ``stream`` is a terminal) rewrites it with
    ``\\r`` on each :meth:`update`; otherwise :meth:`update` prints it as a
    line when ``every_s`` has passed since the line was created or last
    printed. :meth:`close` takes it off and may leave a last line.
    """

    def __init__(
        self,
        *,
        every_s: float = 10.0,
        stream: TextIO | None = None,
        in_place: bool | None = None,
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.in_place = self.stream.isatty() if in_place is None else in_place
        self.every_s = every_s
        self._text = ""
        self._width = 0
        """Characters drawn in place now (0: nothing drawn)."""
        self._next_at = time.monotonic() + every_s

    def update(self, text: str) -> None:
        """Show ``text`` as the line's new state (see the class)."""
        global _drawn
        with _OUTPUT_LOCK:
            if self.in_place:
                columns = shutil.get_terminal_size().columns
                self._text = _fit(text, max(20, columns - 1))
                if _drawn is not None and _drawn is not self:
                    _drawn.close()
                self._draw()
                _drawn = self
            elif time.monotonic() >= self._next_at:
                self._next_at = time.monotonic() + self.every_s
                self.stream.write(text + "\n")
                self.stream.flush()

    def close(self, last: str | None = None) -> None:
        """Take the line off the terminal; ``last`` (when given) is printed as
        a line of its own, wherever the output goes."""
        global _drawn
        with _OUTPUT_LOCK:
            if _drawn is self:
                _drawn = None
            self._erase()
            self._text = ""
            if last is not None:
                self.stream.write(last + "\n")
            self.stream.flush()

    def _draw(self) -> None:
        if not self._text:
            return
        pad = " " * max(0, self._width - len(self._text))
        self.stream.write("\r" + self._text + pad)
        if pad:
            self.stream.write("\r" + self._text)
        self.stream.flush()
        self._width = len(self._text)

    def _erase(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0


def _servers(count: int) -> str:
    return f"{count} server" + ("" if count == 1 else "s")


def started_line(
    name: str, pid: int, port: int | None, log: str, node: str | None = None
) -> str:
    """``afd-e2e: started ffn:0 (pid 4242) on port 8001, log runs/x/ffn-0.log``"""
    where = f" on {node}" if node is not None else ""
    serves = f" on port {port}" if port else ""
    return f"afd-e2e: started {name}{where} (pid {pid}){serves}, log {log}"


def waiting_line(ages: Mapping[str, float], ready: Collection[str]) -> str:
    """``afd-e2e: waiting for 2 servers (12 s): ffn:0 ready, attention:0
    starting``; ``ages``: each awaited server's seconds since its start, in
    start order (the time shown is the oldest's: they start together)."""
    states = ", ".join(
        f"{name} {'ready' if name in ready else 'starting'}" for name in ages
    )
    waited = max(ages.values(), default=0.0)
    return f"afd-e2e: waiting for {_servers(len(ages))} ({waited:.0f} s): {states}"


def ready_line(ready_s: Mapping[str, float], waited_s: float) -> str:
    """``afd-e2e: 2 servers ready after 41 s (ffn:0 35 s, attention:0 41 s)``;
    ``ready_s``: each server's seconds from its start to ready."""
    each = ", ".join(f"{name} {s:.0f} s" for name, s in ready_s.items())
    return f"afd-e2e: {_servers(len(ready_s))} ready after {waited_s:.0f} s ({each})"


class ReadinessLine:
    """The status line of one wait for servers to be ready, for any engine:
    while it lasts, who is ready and who is starting (:func:`waiting_line`,
    fed to ``poll_until_ready`` as its ``progress``); once all are ready,
    :meth:`close` with their times leaves :func:`ready_line`. Used as a
    context manager it is taken off whatever ends the wait. ``every_s`` None:
    it prints nothing."""

    def __init__(self, started_at: Mapping[str, float], every_s: float | None) -> None:
        self.started_at = dict(started_at)
        """Each awaited server's ``time.monotonic()`` at its start."""
        self._line = StatusLine(every_s=every_s) if every_s else None
        self._began = time.monotonic()

    def progress(self, pending: Collection[str], *_: object) -> None:
        if self._line is None:
            return
        now = time.monotonic()
        ages = {name: now - at for name, at in self.started_at.items()}
        self._line.update(waiting_line(ages, set(ages) - set(pending)))

    def close(self, ready_s: Mapping[str, float] | None = None) -> None:
        """Take the line off; with ``ready_s`` leave the all-ready line."""
        if self._line is None:
            return
        waited = time.monotonic() - self._began
        self._line.close(None if ready_s is None else ready_line(ready_s, waited))
        self._line = None

    def __enter__(self) -> ReadinessLine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


__all__ = [
    "ReadinessLine",
    "StatusLine",
    "ready_line",
    "say",
    "started_line",
    "waiting_line",
]
