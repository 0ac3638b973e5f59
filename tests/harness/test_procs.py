# SPDX-License-Identifier: Apache-2.0
"""The process manager against fake role servers: start, readiness, teardown.

Every test ends by proving no process with its run id is left in /proc.
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from afd_e2e.define import policy
from afd_e2e.launch.plan import free_port
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.readiness import Probe, ProbeResult, attention_api_probe
from afd_e2e.processes.role_errors import ProcessDiedError, ReadinessTimeoutError
from afd_e2e.processes.role_process import ProcessSpec

FAKES = Path(__file__).with_name("fake_servers")
SERVER = FAKES / "role_server.py"
DRIVER = FAKES / "driver.py"
ALLOWED = sorted(policy.MARKER_SCAN_SCENARIOS)[0]


def marked_pids(run_id: str) -> list[int]:
    """Live processes whose environ carries this run id (read independently)."""
    needle = f"{policy.RUN_ID_ENV}={run_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


@pytest.fixture
def run_id() -> Iterator[str]:
    """A unique run id; afterwards no process may carry it."""
    rid = f"test-{uuid.uuid4().hex[:12]}"
    yield rid
    left = marked_pids(rid)
    for pid in left:  # clean up before failing, so one bug fails one test
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        os.close(fd)
    assert not left, f"processes left behind with run id {rid}: {left}"


def manager(run_id: str, tmp_path: Path, **options: object) -> ProcessManager:
    settings: dict[str, object] = {
        "scenario_id": "test",
        "grace_s": 2.0,
        "kill_wait_s": 2.0,
        "announce": False,
        "progress_every_s": None,
    }
    settings.update(options)
    return ProcessManager(run_id, tmp_path / "run", **settings)  # type: ignore[arg-type]


def fake(role: str, *flags: str, rank: int = 0) -> ProcessSpec:
    return ProcessSpec(role, rank, [sys.executable, str(SERVER), *flags])


def served(port_file: Path) -> Probe:
    """The attention API probe, once the fake server has written its port."""

    def probe() -> ProbeResult:
        if not port_file.exists():
            return ProbeResult(False, "no port yet")
        return attention_api_probe(f"http://127.0.0.1:{port_file.read_text()}", "m")()

    return probe


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().partition("=")[::2] for e in raw if e)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_cooperative_roles_serve_and_stop_on_sigterm(run_id: str, tmp_path: Path):
    port = tmp_path / "attention.port"
    with manager(run_id, tmp_path) as procs:
        attention = procs.start(fake("attention", "--port-file", str(port)))
        ffn_port = tmp_path / "ffn.port"
        ffn = procs.start(fake("ffn", "--child", "--port-file", str(ffn_port)))
        probes = {"attention:0": served(port), "ffn:0": served(ffn_port)}
        ready = procs.wait_ready(probes, timeout_s=20)
        assert set(ready) == {"attention:0", "ffn:0"}
        env = environ_of(ffn.pid)
        assert env[policy.RUN_ID_ENV] == run_id
        assert env[policy.PROCESS_ROLE_ENV] == "ffn:0"
        assert os.getpgid(attention.pid) == attention.pid  # its own group
        assert os.getsid(attention.pid) == attention.pid  # its own session
        grandchild = psutil.Process(ffn.pid).children()[0].pid
    record = procs.teardown_record
    assert record is not None and record.ok, record.problems()
    assert record.escalated == [] and record.leaks == []
    stopped = {(p.pid, p.found_by) for p in record.terminated}
    assert {(attention.pid, "child"), (ffn.pid, "child")} <= stopped
    assert (grandchild, "tree") in stopped
    assert record.exit_codes == {"attention:0": -15, "ffn:0": -15}
    assert gone(grandchild)
    log = (tmp_path / "run" / "attention-0.log").read_text()
    assert "serving on 127.0.0.1:" in log and "POST /v1/completions" in log


def test_each_roles_time_from_sigterm_to_gone_is_recorded_and_budgeted(
    run_id: str, tmp_path: Path
):
    ports = {r: tmp_path / f"{r}.port" for r in ("attention", "ffn")}
    with manager(run_id, tmp_path) as procs:
        procs.start(fake("attention", "--port-file", str(ports["attention"])))
        procs.start(
            fake("ffn", "--stop-delay-s", "1.5", "--port-file", str(ports["ffn"]))
        )
        procs.wait_ready({f"{r}:0": served(p) for r, p in ports.items()}, timeout_s=20)
    record = procs.teardown_record
    assert record is not None and record.ok, record.problems()
    assert set(record.role_exit_s) == {"attention:0", "ffn:0"}
    assert 1.4 <= record.role_exit_s["ffn:0"] <= record.duration_s
    assert record.role_exit_s["attention:0"] < 1.0
    # A budget the slow role overran fails the teardown, naming it.
    record.budget_s = 1.0
    assert not record.ok
    (problem,) = record.problems()
    assert "over its budget of 1 s (slowest: ffn:0 1." in problem


def test_a_stopped_role_restarts_from_the_same_command(run_id: str, tmp_path: Path):
    port = tmp_path / "ffn.port"
    with manager(run_id, tmp_path) as procs:
        first = procs.start(fake("ffn", "--port-file", str(port)))
        procs.wait_ready({"ffn:0": served(port)}, timeout_s=20)
        with pytest.raises(ValueError, match="is not stopped"):
            procs.restart("ffn:0")
        assert procs.stop_process("ffn:0").ok
        port.unlink()
        second = procs.restart("ffn:0")
        assert second.pid != first.pid and second.spec == first.spec
        procs.wait_ready({"ffn:0": served(port)}, timeout_s=20)
        procs.check_alive()
    record = procs.teardown_record
    assert record is not None and record.ok, record.problems()
    # Both starts were stopped by SIGTERM, and the log holds both.
    assert {p.pid for p in record.terminated} >= {first.pid, second.pid}
    log = (tmp_path / "run" / "ffn-0.log").read_text()
    assert log.count("fake role server pid") == 2


def test_role_ignoring_sigterm_fails_teardown_and_is_named(run_id: str, tmp_path: Path):
    procs = manager(run_id, tmp_path, grace_s=0.5)
    ffn_port, port = tmp_path / "f", tmp_path / "a"
    ffn = procs.start(fake("ffn", "--ignore-sigterm", "--port-file", str(ffn_port)))
    procs.start(fake("attention", "--port-file", str(port)))
    procs.wait_ready({"attention:0": served(port), "ffn:0": served(ffn_port)}, 20)
    began = time.monotonic()
    record = procs.stop()
    assert time.monotonic() - began >= 0.5  # the grace period was honoured
    assert not record.ok
    assert [(p.pid, p.name) for p in record.escalated] == [(ffn.pid, "ffn:0")]
    assert "--ignore-sigterm" in record.escalated[0].cmdline
    assert any(
        "needed SIGKILL" in line and f"pid {ffn.pid}" in line
        for line in record.problems()
    )
    assert record.exit_codes["ffn:0"] == -9
    assert record.exit_codes["attention:0"] == -15
    # Only a role that went by SIGTERM has a time from SIGTERM to gone.
    assert list(record.role_exit_s) == ["attention:0"]


def test_double_forked_grandchild_escaping_the_group_is_found_by_marker(
    run_id: str, tmp_path: Path
):
    port, escaped = tmp_path / "p", tmp_path / "escaped.pid"
    procs = manager(run_id, tmp_path)
    ffn = procs.start(
        fake("ffn", "--port-file", str(port), "--escape-pid-file", str(escaped))
    )
    procs.wait_ready({"ffn:0": served(port)}, timeout_s=20)
    assert escaped.exists()  # written before the server listens
    runaway = int(escaped.read_text())
    assert os.getsid(runaway) != ffn.pid  # out of the session and group
    assert runaway not in {c.pid for c in psutil.Process(ffn.pid).children(True)}
    record = procs.stop()
    assert record.ok, record.problems()
    assert (runaway, "ffn:0", "marker") in {
        (p.pid, p.name, p.found_by) for p in record.terminated
    }
    assert gone(runaway)


def test_role_dying_during_startup_fails_fast_with_its_log_tail(
    run_id: str, tmp_path: Path
):
    procs = manager(run_id, tmp_path)
    procs.start(fake("ffn", "--port-file", str(tmp_path / "f")))
    procs.start(fake("attention", "--die-after-s", "0.3"))
    began = time.monotonic()
    with pytest.raises(ProcessDiedError) as caught:
        procs.wait_ready({"attention:0": served(tmp_path / "never")}, timeout_s=30)
    assert time.monotonic() - began < 10  # far from the 30 s deadline
    error = caught.value
    assert error.names == ("attention:0",) and error.returncode == 3
    assert "attention:0" in str(error) and "exited with code 3" in str(error)
    assert "fatal: cannot load the model weights" in str(error)
    assert "fake role server pid" in error.log_tail[0]
    record = procs.stop()
    assert record.ok, record.problems()
    assert record.exit_codes["attention:0"] == 3


def test_role_dying_after_readiness_is_reported_by_check_alive(
    run_id: str, tmp_path: Path
):
    with manager(run_id, tmp_path) as procs:
        procs.start(fake("ffn", "--die-after-s", "0.5"))
        assert procs.wait_ready({}, timeout_s=5) == {"ffn:0": pytest.approx(0, abs=1)}
        deadline = time.monotonic() + 10
        with pytest.raises(ProcessDiedError, match=r"ffn:0 \(pid \d+\) exited with"):
            while time.monotonic() < deadline:
                procs.check_alive()
                time.sleep(0.05)
    assert procs.teardown_record is not None and procs.teardown_record.ok


def test_role_never_ready_is_named_when_the_deadline_passes(
    run_id: str, tmp_path: Path
):
    ffn_port, port = tmp_path / "f", tmp_path / "a"
    with manager(run_id, tmp_path) as procs:
        procs.start(fake("ffn", "--port-file", str(ffn_port)))
        procs.start(fake("attention", "--port-file", str(port), "--never-ready"))
        probes = {"ffn:0": served(ffn_port), "attention:0": served(port)}
        with pytest.raises(ReadinessTimeoutError) as caught:
            procs.wait_ready(probes, timeout_s=1.0, poll_s=0.05)
    assert caught.value.names == ("attention:0",)
    message = str(caught.value)
    assert message.startswith("not ready after 1.0 s: attention:0\n")
    assert "GET /health: HTTP 503" in message and "ffn:0" not in message
    assert "  | GET /health" in message  # its log tail, quoted
    assert procs.teardown_record is not None and procs.teardown_record.ok


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def streamed(err: str, name: str) -> list[str]:
    """The lines of ``err`` streamed from ``name``'s log, without the prefix."""
    prefix = f"[{name}] "
    return [line[len(prefix) :] for line in err.splitlines() if line.startswith(prefix)]


def serve_once(procs: ProcessManager, tmp_path: Path, *flags: str) -> Path:
    """One fake attention server on a port of its spec, ready and asked once
    (so its log has request lines too); returns its log."""
    port = free_port()
    argv = [sys.executable, str(SERVER), "--port", str(port), *flags]
    proc = procs.start(ProcessSpec("attention", 0, argv, port=port))
    base = f"http://127.0.0.1:{port}"
    procs.wait_ready({"attention:0": attention_api_probe(base, "m")}, 20, poll_s=0.05)
    assert attention_api_probe(base, "m")().ready
    return proc.log_path


def test_server_output_goes_only_to_its_log_by_default(
    run_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    with manager(run_id, tmp_path, announce=True, progress_every_s=0.3) as procs:
        log = serve_once(procs, tmp_path, "--startup-s", "0.8")
        pid = procs.processes[0].pid
    err = capsys.readouterr().err
    lines = log_lines(log)
    assert (
        lines[0].startswith("fake role server pid") and "POST /v1/completions" in lines
    )
    for line in lines:  # not one line of the server's own output was printed
        assert line not in err
    assert streamed(err, "attention:0") == []
    # What the harness says: the start, how the wait goes, that it is over.
    own = err.splitlines()
    assert re.fullmatch(
        rf"afd-e2e: started attention:0 \(pid {pid}\) on port \d+, log {log}", own[0]
    )
    waiting = [line for line in own if line.startswith("afd-e2e: waiting")]
    assert waiting, own
    assert all(
        re.fullmatch(
            r"afd-e2e: waiting for 1 server \(\d+ s\): attention:0 starting", w
        )
        for w in waiting
    ), waiting
    assert re.fullmatch(
        r"afd-e2e: 1 server ready after \d+ s \(attention:0 \d+ s\)", own[-1]
    )
    assert len(own) == 2 + len(waiting) and "\r" not in err


def test_stream_logs_prints_every_line_of_the_log_prefixed(
    run_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    with manager(run_id, tmp_path, stream_logs=True) as procs:
        log = serve_once(procs, tmp_path)
    err = capsys.readouterr().err
    lines = log_lines(log)
    assert "POST /v1/completions" in lines and len(lines) >= 4
    assert streamed(err, "attention:0") == lines  # all of it, in order, once


def test_progress_off_a_terminal_is_one_line_per_interval_naming_every_role(
    run_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    ffn_port, port = tmp_path / "f", tmp_path / "a"
    with manager(run_id, tmp_path, progress_every_s=0.3) as procs:
        procs.start(fake("ffn", "--port-file", str(ffn_port)))
        procs.start(fake("attention", "--port-file", str(port), "--never-ready"))
        probes = {"ffn:0": served(ffn_port), "attention:0": served(port)}
        with pytest.raises(ReadinessTimeoutError):
            procs.wait_ready(probes, timeout_s=3.0, poll_s=0.05)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(
        line.startswith("afd-e2e: waiting for 2 servers (") for line in lines
    )
    assert 2 <= len(lines) <= 11, lines  # one per 0.3 s, not one per role or poll
    role = r"(?:ready|starting)"
    pattern = (
        rf"afd-e2e: waiting for 2 servers \(\d+ s\): ffn:0 {role}, attention:0 starting"
    )
    assert all(re.fullmatch(pattern, line) for line in lines), lines
    assert lines[-1].endswith("s): ffn:0 ready, attention:0 starting")
    assert "\r" not in err  # no in-place updates off a terminal


def test_a_restart_streams_only_its_own_lines(
    run_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    port = tmp_path / "ffn.port"
    with manager(run_id, tmp_path, stream_logs=True) as procs:
        procs.start(fake("ffn", "--port-file", str(port)))
        procs.wait_ready({"ffn:0": served(port)}, timeout_s=20)
        assert procs.stop_process("ffn:0").ok
        port.unlink()
        log = procs.restart("ffn:0").log_path
        procs.wait_ready({"ffn:0": served(port)}, timeout_s=20)
    lines = streamed(capsys.readouterr().err, "ffn:0")
    assert lines == log_lines(log)  # both starts' lines, each printed once
    assert sum(line.startswith("fake role server pid") for line in lines) == 2


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_one_line_updated_in_place(
    run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    # Off a terminal a 60 s interval would print nothing in this wait.
    with manager(run_id, tmp_path, progress_every_s=60) as procs:
        serve_once(procs, tmp_path, "--startup-s", "1.5")
    out = screen.getvalue()
    drawn = re.findall(
        r"\r(afd-e2e: waiting for 1 server \(\d+ s\): attention:0 starting)", out
    )
    assert drawn, repr(out)
    assert out.count("\n") == 1  # the ready line; the status line was taken off
    last = out.rsplit("\r", 1)[1]
    assert re.fullmatch(
        r"afd-e2e: 1 server ready after \d+ s \(attention:0 \d+ s\)\n", last
    )


def test_one_role_stops_early_while_the_others_keep_serving(
    run_id: str, tmp_path: Path
):
    ports = {role: tmp_path / role for role in ("baseline", "ffn", "attention")}
    procs = manager(run_id, tmp_path)
    baseline = procs.start(
        fake("baseline", "--child", "--port-file", str(ports["baseline"]))
    )
    ffn = procs.start(fake("ffn", "--port-file", str(ports["ffn"])))
    probes = {f"{role}:0": served(path) for role, path in ports.items()}
    procs.wait_ready({k: probes[k] for k in ("baseline:0", "ffn:0")}, 20)
    grandchild = psutil.Process(baseline.pid).children()[0].pid

    early = procs.stop_process("baseline:0")
    assert early.ok, early.problems()
    assert {(baseline.pid, "child"), (grandchild, "tree")} <= {
        (p.pid, p.found_by) for p in early.terminated
    }
    assert early.exit_codes == {"baseline:0": -15}
    assert gone(baseline.pid) and gone(grandchild)
    assert ffn.exit_code() is None  # untouched
    assert procs.stop_process("baseline:0") is early  # idempotent
    procs.check_alive()  # the stopped role no longer counts
    assert [p.name for p in procs.running()] == ["ffn:0"]

    # A role started after the others are ready; only it is awaited.
    attention = procs.start(fake("attention", "--port-file", str(ports["attention"])))
    ready = procs.wait_ready({"attention:0": probes["attention:0"]}, 20)
    assert set(ready) == {"ffn:0", "attention:0"}
    with pytest.raises(
        ValueError, match=r"not running under this manager: \['baseline:0'\]"
    ):
        procs.wait_ready({"baseline:0": probes["baseline:0"]}, 1)

    record = procs.stop()
    assert record.ok, record.problems()
    assert record.exit_codes == {"baseline:0": -15, "ffn:0": -15, "attention:0": -15}
    terminated = {p.pid for p in record.terminated}
    assert {baseline.pid, grandchild, ffn.pid, attention.pid} <= terminated
    assert procs.stop_process("ffn:0") is record  # after stop(): stop()'s record


def test_early_stop_that_needs_sigkill_fails_the_final_record(
    run_id: str, tmp_path: Path
):
    procs = manager(run_id, tmp_path, grace_s=0.5)
    port = tmp_path / "b"
    stubborn = procs.start(
        fake("baseline", "--ignore-sigterm", "--port-file", str(port))
    )
    ffn = procs.start(fake("ffn"))
    procs.wait_ready({"baseline:0": served(port)}, 20)  # SIGTERM is ignored now
    early = procs.stop_process("baseline:0")
    assert [(p.pid, p.name) for p in early.escalated] == [(stubborn.pid, "baseline:0")]
    assert ffn.exit_code() is None
    record = procs.stop()
    assert not record.ok
    assert [p.name for p in record.escalated] == ["baseline:0"]
    assert any("needed SIGKILL" in line for line in record.problems())
    assert record.exit_codes == {"baseline:0": -9, "ffn:0": -15}


def test_early_stop_finds_its_escaped_grandchild_by_marker_only(
    run_id: str, tmp_path: Path
):
    port, escaped = tmp_path / "p", tmp_path / "escaped.pid"
    procs = manager(run_id, tmp_path)
    ffn = procs.start(
        fake("ffn", "--port-file", str(port), "--escape-pid-file", str(escaped))
    )
    attention = procs.start(fake("attention"))
    procs.wait_ready({"ffn:0": served(port)}, timeout_s=20)
    runaway = int(escaped.read_text())
    early = procs.stop_process("ffn:0")
    assert early.ok, early.problems()
    assert (runaway, "ffn:0", "marker") in {
        (p.pid, p.name, p.found_by) for p in early.terminated
    }
    assert "attention:0" not in {p.name for p in early.terminated}
    assert gone(runaway) and gone(ffn.pid)
    assert attention.exit_code() is None
    assert procs.stop().ok


def test_wait_ready_for_some_names_leaves_the_others_unprobed(
    run_id: str, tmp_path: Path
):
    ffn_port, port = tmp_path / "f", tmp_path / "a"
    with manager(run_id, tmp_path) as procs:
        procs.start(fake("ffn", "--port-file", str(ffn_port)))
        never = procs.start(
            fake("attention", "--port-file", str(port), "--never-ready")
        )
        probes = {"ffn:0": served(ffn_port), "attention:0": served(port)}
        ready = procs.wait_ready(probes, timeout_s=20, names=["ffn:0"])
        assert list(ready) == ["ffn:0"]
        assert never.ready_after_s is None
        with pytest.raises(ReadinessTimeoutError) as caught:
            procs.wait_ready(probes, timeout_s=0.5, names=["attention:0"])
        assert caught.value.names == ("attention:0",)
    assert procs.teardown_record is not None and procs.teardown_record.ok


def test_wait_exit_returns_the_code_without_reaping(run_id: str, tmp_path: Path):
    procs = manager(run_id, tmp_path)
    alive = procs.start(fake("ffn"))
    dying = procs.start(fake("attention", "--die-after-s", "0.3"))
    began = time.monotonic()
    assert alive.wait_exit(0.2) is None
    assert dying.wait_exit(20) == 3
    assert time.monotonic() - began < 10
    assert dying.popen.returncode is None  # still the manager's to reap
    with pytest.raises(ProcessDiedError, match="attention:0"):
        procs.check_alive()
    record = procs.stop()
    assert record.ok, record.problems()
    assert record.exit_codes == {"ffn:0": -15, "attention:0": 3}
    assert dying.wait_exit(1) == 3


def start_driver(run_id: str, tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    driver = subprocess.Popen(
        [
            sys.executable,
            str(DRIVER),
            "--run-id",
            run_id,
            "--run-dir",
            str(tmp_path / "run"),
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "driver.err").open("w"),
        text=True,
    )
    assert driver.stdout is not None
    ready, _, _ = select.select([driver.stdout], [], [], 20)
    assert ready and driver.stdout.readline() == "READY\n", (
        tmp_path / "driver.err"
    ).read_text()
    return driver


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signal_to_the_harness_still_tears_down_and_exits_130(
    run_id: str, tmp_path: Path, signum: signal.Signals
):
    driver = start_driver(run_id, tmp_path)
    assert len(marked_pids(run_id)) == 2  # both fake roles are up
    driver.send_signal(signum)
    out, _ = driver.communicate(timeout=20)
    assert driver.returncode == 130
    assert out == "TEARDOWN ok\n"
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["outcome"] == "interrupted" and results["exit_code"] == 130
    assert results["interrupted_by"] == signum.name
    assert results["teardown"]["ok"] is True
    roles = sorted(p["name"] for p in results["teardown"]["terminated"])
    assert roles == ["attention:0", "ffn:0"]


def test_second_ctrl_c_does_not_cut_teardown_short(run_id: str, tmp_path: Path):
    driver = start_driver(run_id, tmp_path, "--ffn-ignores-sigterm", "--grace-s", "0.8")
    driver.send_signal(signal.SIGINT)
    time.sleep(0.2)  # teardown is now inside its grace period
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=20)
    assert driver.returncode == 130  # interrupted outranks the teardown failure
    assert out == "TEARDOWN failed\n"
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [p["name"] for p in results["teardown"]["escalated"]] == ["ffn:0"]
    assert "tearing down, wait" in (tmp_path / "driver.err").read_text()


def test_marker_scan_exception_kills_ffn_by_pidfd_and_passes(
    run_id: str, tmp_path: Path
):
    port = tmp_path / "a"
    procs = manager(
        run_id, tmp_path, scenario_id=ALLOWED, marker_scan=True, grace_s=0.5
    )
    ffn_port = tmp_path / "f"
    ffn = procs.start(fake("ffn", "--ignore-sigterm", "--port-file", str(ffn_port)))
    procs.start(fake("attention", "--port-file", str(port)))
    procs.wait_ready({"attention:0": served(port), "ffn:0": served(ffn_port)}, 20)
    record = procs.stop()
    assert record.ok, record.problems()
    assert [(p.pid, p.name, p.found_by) for p in record.marker_killed] == [
        (ffn.pid, "ffn:0", "marker")
    ]
    assert record.escalated == []
    assert record.exit_codes["ffn:0"] == -9


def test_marker_scan_exception_never_covers_attention(run_id: str, tmp_path: Path):
    procs = manager(
        run_id, tmp_path, scenario_id=ALLOWED, marker_scan=True, grace_s=0.3
    )
    port = tmp_path / "a"
    attention = procs.start(
        fake("attention", "--ignore-sigterm", "--port-file", str(port))
    )
    procs.wait_ready({"attention:0": served(port)}, timeout_s=20)
    record = procs.stop()
    assert not record.ok
    assert record.marker_killed == []
    assert [(p.pid, p.name) for p in record.escalated] == [
        (attention.pid, "attention:0")
    ]


def test_marker_scan_exception_is_refused_for_other_scenarios(
    run_id: str, tmp_path: Path
):
    with pytest.raises(ValueError, match="'cpu-eager-1a1f' may not use the marker"):
        manager(run_id, tmp_path, scenario_id="cpu-eager-1a1f", marker_scan=True)
    assert not (tmp_path / "run").exists()


def test_processes_of_other_runs_are_never_signalled(run_id: str, tmp_path: Path):
    other = f"{run_id}-other"
    env = {
        **os.environ,
        policy.RUN_ID_ENV: other,
        policy.PROCESS_ROLE_ENV: "ffn:0",
    }
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=env,
        start_new_session=True,
    )
    try:
        procs = manager(
            run_id, tmp_path, scenario_id=ALLOWED, marker_scan=True, grace_s=0.3
        )
        port = tmp_path / "f"
        procs.start(fake("ffn", "--ignore-sigterm", "--port-file", str(port)))
        procs.wait_ready({"ffn:0": served(port)}, timeout_s=20)
        record = procs.stop()
        assert record.ok, record.problems()
        assert bystander.poll() is None  # still running
        touched = {p.pid for p in record.terminated + record.marker_killed}
        assert bystander.pid not in touched
    finally:
        bystander.kill()
        bystander.wait()
    assert marked_pids(other) == []


def test_spec_lists_every_problem_at_once():
    with pytest.raises(ValueError) as caught:
        ProcessSpec("Attention:", -1, [])
    message = str(caught.value)
    assert "role must match" in message and "rank must be >= 0" in message
    assert "argv must be a non-empty list" in message


def test_markers_in_a_spec_must_match_the_run(run_id: str, tmp_path: Path):
    procs = manager(run_id, tmp_path)
    stale = {policy.RUN_ID_ENV: "some-other-run"}
    with pytest.raises(ValueError, match=f"ffn:0: env sets {policy.RUN_ID_ENV}="):
        procs.start(ProcessSpec("ffn", 0, ["true"], env=stale))
    same = {policy.RUN_ID_ENV: run_id, policy.PROCESS_ROLE_ENV: "ffn:0"}
    ffn = procs.start(ProcessSpec("ffn", 0, ["true"], env=same))
    assert procs.stop().exit_codes == {"ffn:0": 0}
    assert ffn.log_path.read_text() == ""
