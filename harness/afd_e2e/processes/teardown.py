# SPDX-License-Identifier: Apache-2.0
"""Strict teardown of role processes: the SIGKILL policy (AFD-I12).

SIGTERM to each role's process group and to every process found by the run's
marker (escaped double forks too), one shared grace deadline, then SIGKILL for
whatever survived, which fails the record; a final marker scan names anything
left as a leak. The marker-scan exception (``policy.MARKER_SCAN_SCENARIOS``
only) SIGKILLs FFN survivors by pidfd without failing. The result is a
:class:`~afd_e2e.processes.teardown_record.TeardownRecord`; the verdict is the runner's.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass

from afd_e2e.processes.proc_scan import (
    Target,
    adopt,
    scan_marked,
    snapshot_trees,
    wait_exit,
)
from afd_e2e.processes.role_process import RoleProcess
from afd_e2e.processes.teardown_record import TeardownRecord

__all__ = ["Teardown"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Teardown:
    """The teardown settings of one process manager; :meth:`run` applies them."""

    run_id: str
    """Whose marker counts: processes of other runs are never signalled."""
    grace_s: float
    """From the first SIGTERM until SIGKILL, shared by every process."""
    kill_wait_s: float
    """How long SIGKILLed processes get to go (and children to be reaped)."""
    marker_scan: bool
    """The marker-scan exception applies (checked by the manager)."""
    marker_scan_rounds: int

    def run(
        self, procs: Sequence[RoleProcess], only: frozenset[str] | None
    ) -> TeardownRecord:
        """Tear down ``procs``; marked processes of the run count when ``only``
        is None, else those whose ``role:rank`` marker is in ``only``. Each
        process in ``procs`` is released afterwards (:meth:`RoleProcess.release`);
        raises only for a harness bug."""
        began = time.monotonic()
        record = TeardownRecord(grace_s=self.grace_s, marker_scan=self.marker_scan)
        targets: dict[tuple[int, float], Target] = {}
        scope = _Scope(procs, only)
        try:
            self._snapshot(scope, targets)
            deadline = began + self.grace_s
            self._terminate(scope, targets.values(), record, groups=True)
            gone_at: dict[tuple[int, float], float] = {}
            while True:  # late arrivals (forked after the snapshot) get SIGTERM too
                wait_exit(targets.values(), deadline, gone_at)
                fresh = adopt(self._scan(scope, groups=True), targets)
                if not fresh or time.monotonic() >= deadline:
                    break
                self._terminate(scope, fresh, record, groups=False)
            if self.marker_scan and any(t.alive() for t in targets.values()):
                self._marker_kill(scope, targets, record)
            survivors = [t for t in targets.values() if t.alive()]
            record.role_exit_s = _role_exit_s(targets.values(), gone_at, began)
            if survivors:
                record.escalated = [t.record() for t in survivors]
                self._signal_groups(scope, signal.SIGKILL)
                for target in survivors:
                    target.send(signal.SIGKILL)
                wait_exit(survivors, time.monotonic() + self.kill_wait_s)
                record.errors += [
                    f"survived SIGKILL: {t.record().describe()}"
                    for t in survivors
                    if t.alive()
                ]
            self._reap(scope, record)
            leaked = self._scan(scope, groups=False)
            record.leaks = [t.record() for t in leaked]
            for target in leaked:
                target.close()
        finally:
            for target in targets.values():
                target.close()
            for proc in procs:
                proc.release()
        record.duration_s = time.monotonic() - began
        return record

    def _snapshot(
        self, scope: _Scope, targets: dict[tuple[int, float], Target]
    ) -> None:
        """Before any signal: each role's process tree (one psutil pass) plus
        every live process with this run's marker or in a role's group."""
        snapshot_trees(((p.pidfd, p.pid, p.name) for p in scope.procs), targets)
        adopt(self._scan(scope, groups=True), targets)

    def _scan(
        self, scope: _Scope, *, groups: bool, ffn_only: bool = False
    ) -> list[Target]:
        """Live processes with this run's marker (and, with ``groups``, the
        members of unreaped role groups), each pinned by a pidfd."""
        pgids = {}
        if groups:
            live = scope.live_groups()
            pgids = {p.pid: p.name for p in scope.procs if p.pid in live}
        found = scan_marked(self.run_id, pgids, ffn_only=ffn_only)
        if scope.only is None:
            return found
        kept = []
        for target in found:
            if target.name in scope.only:
                kept.append(target)
            else:
                target.close()
        return kept

    def _signal_groups(self, scope: _Scope, signum: int) -> None:
        for pgid in scope.live_groups():
            with suppress(ProcessLookupError):
                os.killpg(pgid, signum)

    def _terminate(
        self,
        scope: _Scope,
        targets: Iterable[Target],
        record: TeardownRecord,
        *,
        groups: bool,
    ) -> None:
        """SIGTERM each live target once: role groups through killpg (with
        ``groups``), every other target (escaped, marked) through its pidfd."""
        signalled = scope.live_groups() if groups else set()
        alive = [t for t in targets if t.alive()]
        record.terminated += [t.record() for t in alive]
        if groups:
            self._signal_groups(scope, signal.SIGTERM)
        for target in alive:
            if target.pgid not in signalled:
                target.send(signal.SIGTERM)

    def _marker_kill(
        self,
        scope: _Scope,
        targets: dict[tuple[int, float], Target],
        record: TeardownRecord,
    ) -> None:
        """The marker-scan exception: SIGKILL FFN survivors via pidfd, bounded."""
        killed: set[tuple[int, float]] = set()
        for _ in range(self.marker_scan_rounds):
            found = self._scan(scope, groups=False, ffn_only=True)
            if not found:
                return
            for target in found:
                if target.send(signal.SIGKILL) and target.key not in killed:
                    killed.add(target.key)
                    record.marker_killed.append(target.record())
                    logger.warning(
                        "marker scan: SIGKILL %s", target.record().describe()
                    )
            wait_exit(found, time.monotonic() + min(1.0, self.kill_wait_s))
            adopt(found, targets)

    def _reap(self, scope: _Scope, record: TeardownRecord) -> None:
        for proc in scope.procs:
            try:
                proc.popen.wait(timeout=max(0.1, self.kill_wait_s))
            except subprocess.TimeoutExpired:
                record.errors.append(f"{proc.name} (pid {proc.pid}) was not reaped")
            record.exit_codes[proc.name] = proc.popen.returncode


@dataclass(frozen=True)
class _Scope:
    """What one teardown covers: its processes, and which markers count
    (every ``role:rank`` of the run when ``only`` is None)."""

    procs: Sequence[RoleProcess]
    only: frozenset[str] | None

    def live_groups(self) -> set[int]:
        """Role process groups; an unreaped leader keeps its pgid from reuse."""
        return {p.pid for p in self.procs if p.popen.returncode is None}


def _role_exit_s(
    targets: Iterable[Target], gone_at: dict[tuple[int, float], float], began: float
) -> dict[str, float]:
    """``role:rank`` -> seconds from SIGTERM until its last process was gone,
    for roles whose every process went within the grace."""
    out: dict[str, float] = {}
    late: set[str] = set()
    for target in targets:
        at = gone_at.get(target.key)
        if at is None:
            late.add(target.name)
        else:
            out[target.name] = max(out.get(target.name, 0.0), at - began)
    return {name: round(s, 3) for name, s in out.items() if name not in late}
