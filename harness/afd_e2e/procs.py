# SPDX-License-Identifier: Apache-2.0
"""Role server processes of one run: start, wait until serving, tear down.

Teardown is strict: SIGTERM, one shared grace deadline, and any SIGKILL fails it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from afd_e2e import policy
from afd_e2e.interrupts import Interrupted, InterruptGuard, say, shielded
from afd_e2e.proc_scan import Target, adopt, scan_marked, snapshot_trees, wait_exit
from afd_e2e.readiness import Probe, poll_until_ready
from afd_e2e.teardown_record import ProcessRecord, TeardownRecord

__all__ = [
    "LOG_TAIL_LINES",
    "NOT_READY_TAIL_LINES",
    "InterruptGuard",
    "Interrupted",
    "ProcessDiedError",
    "ProcessManager",
    "ProcessRecord",
    "ProcessSpec",
    "ReadinessTimeoutError",
    "merge_records",
    "RoleError",
    "RoleProcess",
    "TeardownRecord",
    "tail_lines",
]

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 50
"""Lines of a role's log quoted when it dies."""
NOT_READY_TAIL_LINES = 20
"""Lines of each not-ready role's log quoted when the readiness deadline passes."""

_ROLE_RE = re.compile(r"[a-z][a-z0-9_-]*\Z")
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


# --------------------------------------------------------------------- specs


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


# ------------------------------------------------------------------- errors


class RoleError(RuntimeError):
    """A role process could not start, died, or did not become ready."""

    def __init__(self, message: str, names: Sequence[str]) -> None:
        super().__init__(message)
        self.names = tuple(names)
        """The ``role:rank`` names at fault."""


class ProcessDiedError(RoleError):
    """A role process exited while the run still needed it."""

    def __init__(
        self, name: str, returncode: int, log_path: Path, tail: list[str], message: str
    ) -> None:
        super().__init__(message, [name])
        self.returncode = returncode
        self.log_path = log_path
        self.log_tail = tail


class ReadinessTimeoutError(RoleError):
    """The readiness deadline passed with some role not serving."""


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


def _quote(lines: list[str]) -> str:
    return "\n".join(f"  | {line}" for line in lines) if lines else "  | (log empty)"


# --------------------------------------------------------------- processes


class _LogEcho(threading.Thread):
    """Tails one role's log file and prints each line with a ``[role:rank]`` prefix."""

    def __init__(self, path: Path, name: str) -> None:
        super().__init__(name=f"afd-e2e-echo-{name}", daemon=True)
        self.path, self.prefix = path, f"[{name}] "
        self.halt = threading.Event()

    def run(self) -> None:
        pending = b""
        with open(self.path, "rb") as handle:
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
    echo: _LogEcho | None = None

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


# ------------------------------------------------------------------ manager


class ProcessManager(AbstractContextManager["ProcessManager"]):
    """Starts role processes, waits until they serve, and tears them down.

    Every child runs in its own session with the run markers in its
    environment; its output goes to ``<run_dir>/<role>-<rank>.log`` and, with
    ``echo``, to stderr prefixed ``[role:rank]``. :meth:`stop` (also run on
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
        echo: bool = True,
        progress_every_s: float | None = 5.0,
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
        self.echo = echo
        self.progress_every_s = progress_every_s
        self.base_env = base_env
        """What each child's environment starts from; this process's when None."""
        self._procs: list[RoleProcess] = []
        self._stopped: dict[str, TeardownRecord] = {}
        """Records of the processes :meth:`stop_process` tore down, in order."""
        self._earlier: list[TeardownRecord] = []
        """Records of stops whose process :meth:`restart` started again."""
        self._record: TeardownRecord | None = None

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
            if self.echo:
                proc.echo = _LogEcho(log_path, spec.name)
                proc.echo.start()
        logger.info("started %s as pid %d, log %s", spec.name, popen.pid, log_path)
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
        exited (one torn down by :meth:`stop_process` is not checked)."""
        for proc in self.running():
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
                f"of {proc.log_path}:\n{_quote(tail)}",
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
        role not ready. Every ``progress_every_s`` one line on stderr shows
        each pending role's age and last probe result.
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

        poll_until_ready(
            {n: probes.get(n) for n in awaited if known[n].ready_after_s is None},
            timeout_s=timeout_s,
            poll_s=poll_s,
            check_alive=lambda: self.check_alive("start-up"),
            on_ready=on_ready,
            not_ready=self._not_ready,
            progress=lambda *state: say(self._progress_line(*state)),
            progress_every_s=self.progress_every_s,
        )
        return {n: known[n].ready_after_s or 0.0 for n in awaited}

    def _progress_line(
        self, pending: Iterable[str], seen: Mapping[str, str], waited: float
    ) -> str:
        """``afd-e2e: waiting 35 s: attention:0 35 s (GET /health: ...), ...``"""
        now = time.monotonic()
        by_name = {p.name: p for p in self._procs}
        roles = ", ".join(
            f"{name} {now - by_name[name].started_at:.0f} s "
            f"({seen.get(name, 'not probed yet')})"
            for name in pending
        )
        return f"afd-e2e: waiting {waited:.0f} s: {roles}"

    def _not_ready(
        self, pending: Mapping[str, object], seen: Mapping[str, str], waited: float
    ) -> ReadinessTimeoutError:
        parts = []
        for proc in self._procs:
            if proc.name in pending:
                tail = tail_lines(proc.log_path, NOT_READY_TAIL_LINES)
                parts.append(
                    f"{proc.name} not ready (last probe: {seen.get(proc.name)}); "
                    f"last {len(tail)} lines of {proc.log_path}:\n{_quote(tail)}"
                )
        names = ", ".join(pending)
        return ReadinessTimeoutError(
            f"not ready after {waited:.1f} s: {names}\n" + "\n".join(parts),
            list(pending),
        )

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
                    final = self._teardown(self.running(), only=None)
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
                record = self._teardown(procs, only=frozenset([name]))
            except BaseException as exc:  # a harness bug: fail, never retry
                record = TeardownRecord(self.grace_s, self.marker_scan)
                record.errors.append(f"teardown of {name} crashed: {exc!r}")
                self._stopped[name] = record
                raise
            self._stopped[name] = record
        for problem in record.problems():
            logger.error("teardown of %s: %s", name, problem)
        return record

    def _teardown(
        self, procs: Sequence[RoleProcess], only: frozenset[str] | None
    ) -> TeardownRecord:
        """Tear down ``procs``; marked processes of the run count when ``only``
        is None, else those whose ``role:rank`` marker is in ``only``."""
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
                if proc.echo is not None:
                    proc.echo.halt.set()
                    proc.echo.join(timeout=2.0)
                if proc.pidfd >= 0:
                    os.close(proc.pidfd)
                    proc.pidfd = -1
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


def merge_records(records: Sequence[TeardownRecord]) -> TeardownRecord:
    """One record of several teardowns of the same manager, in order."""
    last = records[-1]
    out = TeardownRecord(grace_s=last.grace_s, marker_scan=last.marker_scan)
    for record in records:
        out.duration_s += record.duration_s
        out.terminated += record.terminated
        out.escalated += record.escalated
        out.marker_killed += record.marker_killed
        out.leaks += [p for p in record.leaks if p not in out.leaks]
        out.errors += record.errors
        out.exit_codes.update(record.exit_codes)
        out.role_exit_s.update(record.role_exit_s)
    return out
