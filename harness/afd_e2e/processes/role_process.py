# SPDX-License-Identifier: Apache-2.0
"""One role server process: what to start (:class:`ProcessSpec`) and the
handle of a started one (:class:`RoleProcess`), which reads its state
without ever reaping it: the process manager reaps, at teardown."""

from __future__ import annotations

import math
import os
import re
import select
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from afd_e2e.processes.role_logs import LogStream

__all__ = ["ProcessSpec", "RoleProcess"]

_ROLE_RE = re.compile(r"[a-z][a-z0-9_-]*\Z")


@dataclass(frozen=True)
class ProcessSpec:
    """One role server process to start."""

    role: str
    """Role name such as ``attention``, ``ffn`` or ``baseline``."""
    rank: int
    """Rank within the role; ``role:rank`` names the process everywhere."""
    argv: Sequence[str]
    """Command line; ``argv[0]`` is looked up on ``PATH``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables added to the harness's environment. The manager sets the run
    markers; a marker given here must equal the manager's value."""
    cwd: Path | None = None
    """Working directory; the harness's own when None."""
    port: int | None = None
    """The port it serves, for the line that says it started (None: none)."""

    def __post_init__(self) -> None:
        errors = []
        if not _ROLE_RE.match(self.role):
            errors.append(f"role must match {_ROLE_RE.pattern}, got {self.role!r}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int):
            errors.append(f"rank must be an int, got {self.rank!r}")
        elif self.rank < 0:
            errors.append(f"rank must be >= 0, got {self.rank}")
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            errors.append(f"argv must be a non-empty list of str, got {self.argv!r}")
        if errors:
            raise ValueError("ProcessSpec: " + "; ".join(errors))
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", dict(self.env))

    @property
    def name(self) -> str:
        return f"{self.role}:{self.rank}"

    @property
    def log_name(self) -> str:
        return f"{self.role}-{self.rank}.log"


@dataclass(eq=False)
class RoleProcess:
    """One started role process (the manager owns it; read, don't signal)."""

    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    """``time.monotonic()`` at launch."""
    pidfd: int
    """Pins the process until its teardown closes it (then -1)."""
    ready_after_s: float | None = None
    """Seconds from launch to ready, once ready."""
    log_stream: LogStream | None = None
    """Prints its log as it grows (``stream_logs``); None: the log file only."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        """The exit code once exited (negative: signal); never reaps the child."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        info = os.waitid(os.P_PID, self.pid, flags)
        if info is None:
            return None
        if info.si_code == os.CLD_EXITED:
            return info.si_status
        return -info.si_status

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the process to exit; its exit code, or
        None while it still runs. Never reaps the child (the manager does)."""
        if self.popen.returncode is None and self.pidfd >= 0:
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            poller.poll(max(0, math.ceil(timeout_s * 1000)))
        return self.exit_code()

    def release(self) -> None:
        """After its teardown: end its log stream, close its pidfd."""
        if self.log_stream is not None:
            self.log_stream.stop()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
