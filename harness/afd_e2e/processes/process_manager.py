# SPDX-License-Identifier: Apache-2.0
"""The role server processes of one run: start, wait until serving, tear down.

:class:`ProcessManager` starts each process in its own session with the run's
markers and its log file, waits for readiness (saying how it goes on one
status line), and tears down under the SIGKILL policy of
:mod:`afd_e2e.processes.teardown`: SIGTERM, one shared grace deadline, and any SIGKILL
fails the record.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any

from afd_e2e.define import policy
from afd_e2e.processes.interrupts import shielded
from afd_e2e.processes.proc_scan import (
    Target,
    adopt,
    scan_marked,
    snapshot_trees,
    wait_exit,
)
from afd_e2e.processes.readiness import Probe, poll_until_ready
from afd_e2e.processes.role_errors import (
    ProcessDiedError,
    ReadinessTimeoutError,
    RoleError,
)
from afd_e2e.processes.role_logs import (
    LOG_TAIL_LINES,
    NOT_READY_TAIL_LINES,
    LogStream,
    quote_tail,
    tail_lines,
)
from afd_e2e.processes.role_process import ProcessSpec, RoleProcess
from afd_e2e.processes.teardown import Teardown
from afd_e2e.processes.teardown_record import (
    ProcessRecord,
    TeardownRecord,
    merge_records,
)
from afd_e2e.processes.terminal import ReadinessLine, say, started_line

__all__ = ["ProcessManager"]

logger = logging.getLogger(__name__)

_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


class ProcessManager(AbstractContextManager["ProcessManager"]):
    """Starts role processes, waits until they serve, and tears them down.

    Every child runs in its own session with the run markers in its
    environment; its output goes to ``<run_dir>/<role>-<rank>.log`` and, with
    ``stream_logs``, to stderr too, each line prefixed ``[role:rank]``. With
    ``announce`` each start prints one line (name, pid, port, log);
    :meth:`wait_ready` keeps one status line up to date unless
    ``progress_every_s`` is None (see there). :meth:`stop` (also run on
    leaving the ``with`` block) never raises for process trouble: it returns a
    :class:`TeardownRecord`. A process may be started after others are ready,
    and torn down early by :meth:`stop_process` while the others keep running;
    :meth:`stop`'s record covers those too.
    """

    def __init__(
        self,
        run_id: str,
        run_dir: Path,
        *,
        scenario_id: str,
        marker_scan: bool = False,
        grace_s: float = 15.0,
        kill_wait_s: float = 5.0,
        marker_scan_rounds: int = 5,
        stream_logs: bool = False,
        announce: bool = True,
        progress_every_s: float | None = 10.0,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        if not _RUN_ID_RE.match(run_id):
            raise ValueError(f"run_id must match {_RUN_ID_RE.pattern}, got {run_id!r}")
        if marker_scan and scenario_id not in policy.MARKER_SCAN_SCENARIOS:
            allowed = ", ".join(sorted(policy.MARKER_SCAN_SCENARIOS))
            raise ValueError(
                f"scenario {scenario_id!r} may not use the marker-scan teardown "
                f"exception; only policy.MARKER_SCAN_SCENARIOS may: {allowed}"
            )
        if not hasattr(os, "pidfd_open"):
            raise RuntimeError("afd-e2e needs Linux >= 5.3 (os.pidfd_open)")
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.scenario_id = scenario_id
        self.marker_scan = marker_scan
        self.grace_s = grace_s
        self.kill_wait_s = kill_wait_s
        self.marker_scan_rounds = marker_scan_rounds
        self.stream_logs = stream_logs
        self.announce = announce
        self.progress_every_s = progress_every_s
        self.base_env = base_env
        """What each child's environment starts from; this process's when None."""
        self._procs: list[RoleProcess] = []
        self._stopped: dict[str, TeardownRecord] = {}
        """Records of the processes :meth:`stop_process` tore down, in order."""
        self._earlier: list[TeardownRecord] = []
        """Records of stops whose process :meth:`restart` started again."""
        self._record: TeardownRecord | None = None
        self._injected: dict[str, list[ProcessRecord]] = {}
        """Per ``role:rank``: what :meth:`kill_process` SIGKILLed on purpose."""
        self.injected_at: dict[str, float] = {}
        """Per ``role:rank``: when :meth:`kill_process` sent its SIGKILL last
        (``time.monotonic()``, the system-wide clock on Linux)."""
        self._may_exit: set[str] = set()
        """Processes a check killed, or whose exit it declared a consequence
        (:meth:`expect_exit`): :meth:`check_alive` skips them."""

    # -- starting

    @property
    def processes(self) -> tuple[RoleProcess, ...]:
        return tuple(self._procs)

    def start(self, spec: ProcessSpec) -> RoleProcess:
        """Launch one role process in its own session; returns at once."""
        if self._record is not None:
            raise RuntimeError("this ProcessManager was already torn down")
        if any(p.name == spec.name for p in self._procs):
            raise ValueError(f"{spec.name} is already started")
        markers = {policy.RUN_ID_ENV: self.run_id, policy.PROCESS_ROLE_ENV: spec.name}
        wrong = [
            f"{key}={spec.env[key]!r} (the manager sets {value!r})"
            for key, value in markers.items()
            if key in spec.env and spec.env[key] != value
        ]
        if wrong:
            raise ValueError(f"{spec.name}: env sets {'; '.join(wrong)}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.run_dir / spec.log_name
        base = os.environ if self.base_env is None else self.base_env
        env = {**base, **spec.env, **markers}
        with shielded(deliver=True):
            with open(log_path, "ab") as log:
                offset = log.tell()  # a restart's log continues the file
                try:
                    popen = subprocess.Popen(
                        list(spec.argv),
                        env=env,
                        cwd=spec.cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as exc:
                    raise RoleError(
                        f"{spec.name}: cannot start {spec.argv[0]!r}: {exc}",
                        [spec.name],
                    ) from exc
            proc = RoleProcess(
                spec, popen, log_path, time.monotonic(), os.pidfd_open(popen.pid)
            )
            self._procs.append(proc)
            if self.stream_logs:
                proc.log_stream = LogStream(log_path, spec.name, offset)
                proc.log_stream.start()
        logger.info("started %s as pid %d, log %s", spec.name, popen.pid, log_path)
        if self.announce:
            say(started_line(spec.name, popen.pid, spec.port, str(log_path)))
        return proc

    def restart(self, name: str) -> RoleProcess:
        """Start a process that :meth:`stop_process` tore down again, with the
        same spec (argv, environment, so the same ports): a cold start of that
        server. Its log continues in the same file; the record of its stop
        stays part of the final teardown record."""
        if name not in self._stopped:
            raise ValueError(f"{name} is not stopped: stop_process() it first")
        old = next(p for p in self._procs if p.name == name)
        self._earlier.append(self._stopped.pop(name))
        self._procs.remove(old)
        return self.start(old.spec)

    def commands(self) -> dict[str, dict[str, Any]]:
        """Per ``role:rank``: argv, extra env, cwd, log file and pid."""
        return {
            p.name: {
                "argv": list(p.spec.argv),
                "env": dict(p.spec.env),
                "cwd": None if p.spec.cwd is None else str(p.spec.cwd),
                "log": str(p.log_path),
                "pid": p.pid,
            }
            for p in self._procs
        }

    # -- readiness

    def running(self) -> tuple[RoleProcess, ...]:
        """Started processes not torn down yet (by :meth:`stop_process`)."""
        if self._record is not None:
            return ()
        return tuple(p for p in self._procs if p.name not in self._stopped)

    def check_alive(self, during: str = "the run") -> None:
        """Raise :class:`ProcessDiedError` for the first running process that
        exited (one torn down by :meth:`stop_process`, killed by
        :meth:`kill_process` or expected to exit is not checked)."""
        for proc in self.running():
            if proc.name in self._may_exit:
                continue
            code = proc.exit_code()
            if code is None:
                continue
            elapsed = time.monotonic() - proc.started_at
            tail = tail_lines(proc.log_path, LOG_TAIL_LINES)
            raise ProcessDiedError(
                proc.name,
                code,
                proc.log_path,
                tail,
                f"{proc.name} (pid {proc.pid}) exited with code {code} during "
                f"{during}, {elapsed:.1f} s after launch; last {len(tail)} lines "
                f"of {proc.log_path}:\n{quote_tail(tail)}",
            )

    def wait_ready(
        self,
        probes: Mapping[str, Probe | None],
        timeout_s: float,
        *,
        poll_s: float = 0.2,
        names: Collection[str] | None = None,
    ) -> dict[str, float]:
        """Poll until every process is ready; returns ``role:rank`` -> seconds.

        A process without a probe (or a None probe) is ready while alive; one
        ready before is not probed again. With ``names``, only those processes
        are awaited (and returned). Each poll first checks every running
        child, awaited or not: one that exited raises :class:`ProcessDiedError`
        at once. Past ``timeout_s``, :class:`ReadinessTimeoutError` names every
        role not ready. Meanwhile one status line on stderr names each awaited
        role, ready or starting (and for how long): on a terminal it is
        updated in place every second, elsewhere printed every
        ``progress_every_s``; once all are ready it becomes one line saying so.
        """
        known = {p.name: p for p in self.running()}
        awaited = list(known) if names is None else list(dict.fromkeys(names))
        unknown = sorted((set(probes) | set(awaited)) - set(known))
        if unknown:
            raise ValueError(f"not running under this manager: {unknown}")

        def on_ready(name: str) -> None:
            proc = known[name]
            proc.ready_after_s = time.monotonic() - proc.started_at
            logger.info("%s ready after %.1f s", name, proc.ready_after_s)

        every = self.progress_every_s
        starts = {n: known[n].started_at for n in awaited}
        with ReadinessLine(starts, every) as line:
            poll_until_ready(
                {n: probes.get(n) for n in awaited if known[n].ready_after_s is None},
                timeout_s=timeout_s,
                poll_s=poll_s,
                check_alive=lambda: self.check_alive("start-up"),
                on_ready=on_ready,
                not_ready=self._not_ready,
                progress=line.progress if every else None,
                progress_every_s=min(1.0, every) if every else None,
            )
            ready = {n: known[n].ready_after_s or 0.0 for n in awaited}
            line.close(ready)
        return ready

    def _not_ready(
        self, pending: Mapping[str, object], seen: Mapping[str, str], waited: float
    ) -> ReadinessTimeoutError:
        parts = []
        for proc in self._procs:
            if proc.name in pending:
                tail = tail_lines(proc.log_path, NOT_READY_TAIL_LINES)
                parts.append(
                    f"{proc.name} not ready (last probe: {seen.get(proc.name)}); "
                    f"last {len(tail)} lines of {proc.log_path}:\n{quote_tail(tail)}"
                )
        names = ", ".join(pending)
        return ReadinessTimeoutError(
            f"not ready after {waited:.1f} s: {names}\n" + "\n".join(parts),
            list(pending),
        )

    # -- injected faults

    def kill_process(self, name: str) -> list[ProcessRecord]:
        """SIGKILL one running server now, as a fault a check injects: its
        process group, its tree and every process with its ``role:rank``
        marker, at once. Returns what was killed; the final teardown record
        lists it under ``injected`` (allowed), and :meth:`check_alive` no longer
        checks it. Teardown still SIGTERMs anything of it that is left."""
        proc = next((p for p in self.running() if p.name == name), None)
        if proc is None:
            raise ValueError(f"{name} is not running under this manager")
        self._may_exit.add(name)
        with shielded(deliver=True):
            targets: dict[tuple[int, float], Target] = {}
            snapshot_trees([(proc.pidfd, proc.pid, name)], targets)
            for target in scan_marked(self.run_id, {proc.pid: name}):
                if target.name == name:
                    adopt([target], targets)
                else:  # another server's process: never touched here
                    target.close()
            self.injected_at[name] = time.monotonic()
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            killed = list(targets.values())
            for target in killed:
                target.send(signal.SIGKILL)
            wait_exit(killed, time.monotonic() + self.kill_wait_s)
            records = [t.record() for t in killed]
            for target in killed:
                target.close()
        self._injected.setdefault(name, []).extend(records)
        logger.warning("injected fault: SIGKILL %s (%d processes)", name, len(records))
        return records

    def expect_exit(self, name: str) -> None:
        """Declare that ``name`` may now exit (the consequence of an injected
        fault): :meth:`check_alive` no longer checks it; teardown still stops
        whatever of it is left."""
        if not any(p.name == name for p in self._procs):
            raise ValueError(f"{name} was never started")
        self._may_exit.add(name)

    # -- teardown

    @property
    def teardown_record(self) -> TeardownRecord | None:
        return self._record

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> TeardownRecord:
        """Tear everything down (idempotent); signals are deferred meanwhile.

        The record also holds what :meth:`stop_process` did earlier, and every
        process with this run's marker counts: a leftover of an early-stopped
        process is signalled (and named) here too.
        """
        if self._record is None:
            with shielded(deliver=False):
                try:
                    final = self._tear_down(self.running(), only=None)
                except BaseException as exc:  # a harness bug: fail, never retry
                    final = TeardownRecord(self.grace_s, self.marker_scan)
                    final.errors.append(f"teardown crashed: {exc!r}")
                    self._record = merge_records(
                        [*self._earlier, *self._stopped.values(), final]
                    )
                    raise
                self._record = merge_records(
                    [*self._earlier, *self._stopped.values(), final]
                )
                self._record.injected = self._injected_records(None)
            for problem in final.problems():
                logger.error("teardown: %s", problem)
        return self._record

    def stop_process(self, name: str) -> TeardownRecord:
        """Tear down one process now, as :meth:`stop` does, while the others
        keep running; returns its own record (idempotent).

        Its processes are its tree, its group and every process carrying its
        ``role:rank`` marker. Afterwards :meth:`check_alive` and
        :meth:`wait_ready` ignore it. After :meth:`stop`, returns that record.
        """
        if name in self._stopped:
            return self._stopped[name]
        if self._record is not None:
            return self._record
        procs = [p for p in self._procs if p.name == name]
        if not procs:
            raise ValueError(f"{name} was never started")
        with shielded(deliver=True):
            try:
                record = self._tear_down(procs, only=frozenset([name]))
            except BaseException as exc:  # a harness bug: fail, never retry
                record = TeardownRecord(self.grace_s, self.marker_scan)
                record.errors.append(f"teardown of {name} crashed: {exc!r}")
                self._stopped[name] = record
                raise
            record.injected = self._injected_records(name)
            self._stopped[name] = record
        for problem in record.problems():
            logger.error("teardown of %s: %s", name, problem)
        return record

    def _injected_records(self, name: str | None) -> list[ProcessRecord]:
        """What :meth:`kill_process` killed: of ``name``, or of every server."""
        names = list(self._injected) if name is None else [name]
        return [r for n in names for r in self._injected.get(n, [])]

    def _tear_down(
        self, procs: Sequence[RoleProcess], only: frozenset[str] | None
    ) -> TeardownRecord:
        return Teardown(
            self.run_id,
            self.grace_s,
            self.kill_wait_s,
            self.marker_scan,
            self.marker_scan_rounds,
        ).run(procs, only)
