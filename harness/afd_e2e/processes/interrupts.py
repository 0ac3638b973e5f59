# SPDX-License-Identifier: Apache-2.0
"""SIGINT/SIGTERM during a run: the first raises Interrupted, or waits while shielded.

The handler prints through :func:`afd_e2e.processes.terminal.say`, whose lock
is re-entrant.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import FrameType
from typing import Any

from afd_e2e.processes.terminal import say


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the harness; teardown still runs."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {self.signame}")

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name


class InterruptGuard(AbstractContextManager["InterruptGuard"]):
    """Turns the first SIGINT/SIGTERM into :class:`Interrupted`, so teardown runs.

    Use as ``with InterruptGuard() as guard:`` in the main thread. Later signals
    are recorded and ignored; a signal arriving while the manager starts a
    process is raised once the process is recorded; one arriving during
    teardown is recorded only (read :attr:`signum`), never raised.
    """

    _active: InterruptGuard | None = None

    def __init__(self, signums: Iterable[int] = (signal.SIGINT, signal.SIGTERM)):
        self.signums = tuple(signums)
        self.signum: int | None = None
        """The first signal received, or None."""
        self._shield_depth = 0
        self._previous: dict[int, Any] = {}
        self._outer: InterruptGuard | None = None

    @property
    def signame(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    def __enter__(self) -> InterruptGuard:
        for signum in self.signums:
            self._previous[signum] = signal.signal(signum, self._handle)
        self._outer, InterruptGuard._active = InterruptGuard._active, self
        return self

    def __exit__(self, *exc_info: object) -> None:
        InterruptGuard._active = self._outer
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if first and not self._shield_depth:
            raise Interrupted(signum)
        say(f"afd-e2e: {signal.Signals(signum).name} received; tearing down, wait")

    @contextmanager
    def shielded(self, deliver: bool) -> Iterator[None]:
        """Defer signals; with ``deliver`` raise a deferred first one at the end."""
        before = self.signum
        self._shield_depth += 1
        try:
            yield
        finally:
            self._shield_depth -= 1
        if deliver and before is None and self.signum and not self._shield_depth:
            raise Interrupted(self.signum)


def shielded(deliver: bool) -> AbstractContextManager[None]:
    """:meth:`InterruptGuard.shielded` of the active guard; a no-op without one."""
    guard = InterruptGuard._active
    return nullcontext() if guard is None else guard.shielded(deliver)
