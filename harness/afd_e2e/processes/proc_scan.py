# SPDX-License-Identifier: Apache-2.0
"""Finding a run's processes: pidfd handles, process trees, /proc marker scans.

Each pid is pinned by pidfd_open before it is read: a recycled pid is never hit.
"""

from __future__ import annotations

import math
import os
import select
import signal
import time
from collections.abc import Iterable, Mapping

import psutil

from afd_e2e.define import policy
from afd_e2e.processes.teardown_record import ProcessRecord


def open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, or None when it is gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def has_exited(fd: int) -> bool:
    """Whether the process behind a pidfd has exited (never blocks)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def read_markers(pid: int) -> tuple[str | None, str | None]:
    """(run id, role:rank) from a process's environ; read only after pidfd_open."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None, None
    run_id = role = None
    for entry in raw.split(b"\0"):
        key, _, value = entry.partition(b"=")
        if key == policy.RUN_ID_ENV.encode():
            run_id = value.decode(errors="replace")
        elif key == policy.PROCESS_ROLE_ENV.encode():
            role = value.decode(errors="replace")
    return run_id, role


def describe_process(pid: int) -> tuple[float, tuple[str, ...]]:
    """(create time, command line) of a process; the command line may be empty."""
    process = psutil.Process(pid)
    with process.oneshot():
        try:
            cmdline = tuple(process.cmdline())
        except (psutil.AccessDenied, psutil.ZombieProcess):
            cmdline = ()
        return process.create_time(), cmdline


class Target:
    """A process the harness may signal, held through a pidfd (no pid reuse)."""

    def __init__(self, fd: int, pid: int, name: str, found_by: str) -> None:
        self.fd, self.pid, self.name, self.found_by = fd, pid, name, found_by
        self.create_time, self.cmdline = describe_process(pid)
        self.pgid = os.getpgid(pid)

    @classmethod
    def pin(
        cls, pid: int, name: str, found_by: str, fd: int | None = None
    ) -> Target | None:
        """Open a pidfd (unless given one), then read the process; None if gone."""
        fd = open_pidfd(pid) if fd is None else fd
        if fd is None:
            return None
        try:
            return cls(fd, pid, name, found_by)
        except (OSError, psutil.Error):
            os.close(fd)
            return None

    @property
    def key(self) -> tuple[int, float]:
        return self.pid, self.create_time

    def alive(self) -> bool:
        return not has_exited(self.fd)

    def send(self, signum: int) -> bool:
        try:
            signal.pidfd_send_signal(self.fd, signum)
        except ProcessLookupError:
            return False
        return True

    def record(self) -> ProcessRecord:
        return ProcessRecord(self.pid, self.name, self.cmdline, self.found_by)

    def close(self) -> None:
        os.close(self.fd)


def wait_exit(
    targets: Iterable[Target],
    deadline: float,
    gone_at: dict[tuple[int, float], float] | None = None,
) -> None:
    """Block until every target exited or the deadline passed; ``gone_at``
    gets the monotonic time each target was seen gone (by its key)."""
    poller = select.poll()
    by_fd = {t.fd: t for t in targets}
    pending = set(by_fd)
    for fd in pending:
        poller.register(fd, select.POLLIN)
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        for fd, _ in poller.poll(math.ceil(remaining * 1000)):
            poller.unregister(fd)
            pending.discard(fd)
            if gone_at is not None:
                gone_at.setdefault(by_fd[fd].key, time.monotonic())


def adopt(
    found: Iterable[Target], targets: dict[tuple[int, float], Target]
) -> list[Target]:
    """Add new targets, close duplicates; returns the new ones."""
    fresh = []
    for target in found:
        if target.key in targets:
            target.close()
        else:
            targets[target.key] = target
            fresh.append(target)
    return fresh


def snapshot_trees(
    roots: Iterable[tuple[int, int, str]], targets: dict[tuple[int, float], Target]
) -> None:
    """Adopt each root ``(pidfd, pid, role:rank)`` (its pidfd is duplicated) and
    its descendants, found in one psutil pass made before reading any root."""
    children: dict[int, list[psutil.Process]] = {}
    for process in psutil.process_iter(["ppid"]):
        children.setdefault(process.info["ppid"], []).append(process)
    for root_fd, root_pid, name in roots:
        root = Target(os.dup(root_fd), root_pid, name, "child")
        adopt([root], targets)
        stack = list(children.get(root_pid, []))
        while stack:
            child = stack.pop()
            stack += children.get(child.pid, [])
            target = Target.pin(child.pid, name, "tree")
            if target is None:
                continue
            if target.create_time == child.create_time():
                adopt([target], targets)
            else:  # the pid was reused since the psutil pass
                target.close()


def scan_marked(
    run_id: str, pgids: Mapping[int, str], *, ffn_only: bool = False
) -> list[Target]:
    """Live processes with ``run_id``'s marker (only ``ffn:*`` ones with
    ``ffn_only``) or in one of ``pgids`` (process group -> ``role:rank``)."""
    found = []
    own = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == own:
            continue
        pid = int(entry)
        fd = open_pidfd(pid)
        if fd is None:
            continue
        try:
            marked_run, role = read_markers(pid)
            if marked_run == run_id and (
                not ffn_only or (role or "").startswith("ffn:")
            ):
                target = Target(fd, pid, role or "?", "marker")
            elif pgids and (pgid := os.getpgid(pid)) in pgids:
                target = Target(fd, pid, pgids[pgid], "group")
            else:
                os.close(fd)
                continue
        except (OSError, psutil.Error):
            os.close(fd)
            continue
        if target.alive():
            found.append(target)
        else:
            target.close()
    return found
