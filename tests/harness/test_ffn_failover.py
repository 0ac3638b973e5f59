# SPDX-License-Identifier: Apache-2.0
"""The FFN failover check against fakes: a streaming attention API whose
kills a fake injector turns into a failover (or into failed streams), and
the process manager's record of a kill a check injects."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_procs import fake, manager, run_id  # noqa: F401 - fixture

from afd_e2e.checks.ffn_failover import (
    FailoverTarget,
    FfnServer,
    failover_seconds,
    run_ffn_failover,
)
from afd_e2e.define.scenario import FfnFailoverCheck
from afd_e2e.processes.readiness import health_probe
from afd_e2e.publish.report import RunReport, Timings, summary_table


def ids_of(prompt: str, count: int) -> list[int]:
    """The fake model's greedy ids: the same for a prompt on any server."""
    return [(len(prompt) * 7 + k) % 500 for k in range(count)]


class Deployment:
    """What the fake servers share: the attention API streams one id per
    step; a kill stalls the steps, then promotes a standby (failovers and
    promotions count up, a line is logged) or, with none left, fails every
    stream."""

    def __init__(self, log: Path, standbys: int, step_s: float = 0.01) -> None:
        self.log, self.standbys, self.step_s = log, standbys, step_s
        self.failovers = 0
        self.promoted: list[int] = []
        self.stalled = False
        self.broken = False

    def kill(self) -> None:
        self.stalled = True
        if len(self.promoted) == self.standbys:
            self.broken = True
            return

        def promote() -> None:
            time.sleep(0.1)
            self.promoted.append(len(self.promoted))
            self.failovers += 1
            with self.log.open("a") as handle:
                handle.write(
                    "INFO afd-plugin: failover: FFN rank 0 (pid 1) -> standby "
                    f"{self.promoted[-1]} (pid 2) in 0.{self.failovers}2 s\n"
                )
            self.stalled = False

        threading.Thread(target=promote, daemon=True).start()


def handler(deployment: Deployment) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.startswith("/standby"):
                rank = int(self.path.split("/")[1].removeprefix("standby"))
                value = 1 if rank in deployment.promoted else 0
                text = f'afd:standby_promotions_total{{role="ffn",rank="0"}} {value}\n'
            else:
                text = (
                    'afd:ffn_failovers_total{role="attention",rank="0"} '
                    f"{deployment.failovers}\n"
                )
            raw = text.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            ids = ids_of(body["prompt"], body["max_tokens"])
            for k, token in enumerate(ids):
                while deployment.stalled and not deployment.broken:
                    time.sleep(0.01)
                if deployment.broken:
                    self._event({"error": {"message": "FFN peer 0 is gone"}})
                    return
                last = k == len(ids) - 1
                choice = {
                    "index": 0,
                    "text": f" t{token}",
                    "token_ids": [token],
                    "finish_reason": "length" if last else None,
                }
                self._event({"choices": [choice]})
                time.sleep(deployment.step_s)
            self.wfile.write(b"data: [DONE]\n\n")

        def _event(self, payload: dict) -> None:
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    servers: list[ThreadingHTTPServer] = []

    def start(deployment: Deployment) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler(deployment))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class Injector:
    """Records what the check killed and expected to exit."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.killed: list[str] = []
        self.may_exit: list[str] = []

    def kill_process(self, name: str) -> None:
        self.killed.append(name)
        self.deployment.kill()

    def expect_exit(self, name: str) -> None:
        self.may_exit.append(name)


def target(url: str, log: Path, standbys: int) -> FailoverTarget:
    ffn = [FfnServer("ffn:0", url)]
    ffn += [FfnServer(f"standby:{i}", f"{url}/standby{i}") for i in range(standbys)]
    return FailoverTarget(url, "m", ffn, ["attention:0"], [log], peer_timeout_s=2.0)


def reference(prompts: list[str], count: int) -> list[list[int]]:
    return [ids_of(p, count) for p in prompts]


def test_each_kill_fails_over_to_the_next_standby(tmp_path: Path, serve) -> None:
    log = tmp_path / "attention-0.log"
    deployment = Deployment(log, standbys=2)
    url = serve(deployment)
    injector = Injector(deployment)
    spec = FfnFailoverCheck(concurrency=6, max_tokens=60, kills=2)
    outcome = run_ffn_failover(target(url, log, 2), spec, injector, reference, 30)
    assert outcome.passed, outcome.message
    # the active server each time: ffn-0, then the standby it promoted
    assert injector.killed == ["ffn:0", "standby:0"]
    assert injector.may_exit == []
    figures = outcome.figures
    assert figures["completed"] == 6 and figures["failed"] == 0
    assert figures["killed"] == ["ffn-0", "standby-0"]
    assert figures["promoted"] == ["standby-0", "standby-1"]
    assert figures["failover_s"] == [0.12, 0.22]
    assert figures["mismatched_streams"] == 0
    assert "2 kill(s) (ffn-0, standby-0; failover 0.12 s, 0.22 s)" in outcome.message


def test_tokens_that_differ_from_the_colocated_run_fail(tmp_path: Path, serve) -> None:
    log = tmp_path / "attention-0.log"
    deployment = Deployment(log, standbys=1)
    url = serve(deployment)

    def shifted(prompts: list[str], count: int) -> list[list[int]]:
        out = reference(prompts, count)
        out[0][-1] += 1
        return out

    spec = FfnFailoverCheck(concurrency=4, max_tokens=30, kills=1)
    outcome = run_ffn_failover(
        target(url, log, 1), spec, Injector(deployment), shifted, 30
    )
    assert not outcome.passed
    assert outcome.message.startswith(
        "FAIL ffn_failover: 1/4 streams' tokens differ from the colocated run's"
    )


def test_the_kill_without_a_standby_must_fail_every_stream(
    tmp_path: Path, serve
) -> None:
    log = tmp_path / "attention-0.log"
    deployment = Deployment(log, standbys=1)
    url = serve(deployment)
    injector = Injector(deployment)
    spec = FfnFailoverCheck(concurrency=5, max_tokens=200, kills=2, expect="fail")
    outcome = run_ffn_failover(target(url, log, 1), spec, injector, None, 30)
    assert outcome.passed, outcome.message
    assert injector.killed == ["ffn:0", "standby:0"]
    assert injector.may_exit == ["attention:0"]  # its death is the consequence
    figures = outcome.figures
    assert figures["completed"] == 0 and figures["failed"] == 5
    assert 0 <= figures["time_to_failure_s"] < 2.0 + 30
    assert "5 streams failed" in outcome.message


def test_a_kill_that_cannot_land_mid_generation_fails(tmp_path: Path, serve) -> None:
    log = tmp_path / "attention-0.log"
    deployment = Deployment(log, standbys=2, step_s=0.0)
    url = serve(deployment)
    # 2 tokens: the streams end before the second kill can land
    spec = FfnFailoverCheck(concurrency=2, max_tokens=2, kills=2)
    outcome = run_ffn_failover(
        target(url, log, 2), spec, Injector(deployment), reference, 30
    )
    assert not outcome.passed
    assert "cannot land mid-generation" in outcome.message
    assert "raise max_tokens" in outcome.message


def test_failover_seconds_reads_only_lines_after_the_mark(tmp_path: Path) -> None:
    log = tmp_path / "attention-0.log"
    log.write_text("afd-plugin: failover: FFN rank 0 (pid 1) -> standby 0 in 9.5 s\n")
    mark = {log: log.stat().st_size}
    with log.open("a") as handle:
        handle.write("x afd-plugin: failover: FFN rank 0 (pid 123) -> standby 0 ")
        handle.write("(pid 456) in 1.23 s\nunrelated in 4 s\n")
    assert failover_seconds([log], mark) == [1.23]
    assert failover_seconds([tmp_path / "missing.log"], {}) == []


def test_a_killed_server_is_an_injected_fault_not_a_teardown_failure(
    run_id: str,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    port_ffn, port_attention = tmp_path / "ffn.port", tmp_path / "attention.port"
    procs = manager(run_id, tmp_path)
    ffn = procs.start(fake("ffn", "--child", "--port-file", str(port_ffn)))
    attention = procs.start(fake("attention", "--port-file", str(port_attention)))
    for port in (port_ffn, port_attention):
        deadline = time.monotonic() + 20
        while not port.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    procs.wait_ready(
        {"attention:0": health_probe(f"http://127.0.0.1:{port_attention.read_text()}")},
        20,
    )
    killed = procs.kill_process("ffn:0")
    assert ffn.pid in {p.pid for p in killed} and len(killed) >= 2  # and its child
    assert ffn.wait_exit(5) == -9
    procs.check_alive("after the kill")  # a killed server is no unexpected death
    procs.expect_exit("attention:0")
    record = procs.stop()
    assert record.ok, record.problems()
    assert {p.name for p in record.injected} == {"ffn:0"}
    assert record.escalated == []
    assert record.exit_codes["ffn:0"] == -9
    assert record.exit_codes["attention:0"] is not None
    assert attention.pid in {p.pid for p in record.terminated}
    report = RunReport("s", run_id, {}, Timings(time.time()), teardown=record)
    assert "SIGKILLed by a check (injected fault)" in summary_table(report)
    assert json.loads(json.dumps(record.to_dict()))["injected"][0]["name"] == "ffn:0"


def test_a_server_that_exits_unexpectedly_still_fails_the_check(
    run_id: str,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    from afd_e2e.processes.role_errors import ProcessDiedError

    procs = manager(run_id, tmp_path)
    procs.start(fake("ffn", "--die-after-s", "0.1"))
    proc = procs.start(fake("attention", "--die-after-s", "0.1"))
    proc.wait_exit(10)
    procs.processes[0].wait_exit(10)
    procs.expect_exit("attention:0")
    with pytest.raises(ProcessDiedError, match="ffn:0"):
        procs.check_alive("the check")
    procs.stop()
