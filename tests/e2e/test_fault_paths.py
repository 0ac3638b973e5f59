# SPDX-License-Identifier: Apache-2.0
"""Fault paths through real vLLM: a role stopped (SIGSTOP) mid-generation or
while idle, a client that hangs up mid-stream, a peer killed while the other
waits at the AFD rendezvous, and one killed during the other's teardown.

Each fault ends in what a user can see: a failed request at the peer timeout,
servers that exit naming the lost peer, or a deployment that keeps serving the
same tokens; and every process ends (the ``servers`` fixture fails a test
whose teardown needed SIGKILL or left a process behind).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from streaming_client import StreamingClient, completion_body

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.launch.plan import HOST, free_port
from afd_e2e.processes.proc_scan import scan_marked
from afd_e2e.processes.servers import VllmServer, VllmServers, afd_config

pytestmark = pytest.mark.e2e

EXIT_WITHIN_S = 30.0
"""A server left without its peer (or told to stop) is gone within this."""
CHECK_PROMPTS = PROMPTS[:3]
CHECK_TOKENS = 16
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def extra(**fields: float) -> dict[str, float]:
    return {"rendezvous_timeout_s": 300.0, **fields}


def tree_pids(server: VllmServer) -> set[int]:
    root = psutil.Process(server.pid)
    return {root.pid, *(p.pid for p in root.children(recursive=True))}


def listens_on(server: VllmServer, port: int) -> bool:
    try:
        root = psutil.Process(server.pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for process in processes:
        try:
            connections = process.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        if any(
            c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections
        ):
            return True
    return False


def running_requests(server: VllmServer) -> float:
    """vLLM's ``num_requests_running`` gauge, all models."""
    return server.counter("vllm:num_requests_running")


def assert_exits(server: VllmServer, within_s: float, why: str) -> int:
    code = server.wait_exit(within_s)
    assert code is not None, f"{server.name} still up {why}\n{server.log_tail()}"
    return code


# -- a role stopped ------------------------------------------------------------


FFN_PEER_TIMEOUT_S = 8.0


def test_ffn_sigstopped_fails_the_request_at_peer_timeout(
    servers: VllmServers, deepseek_v2: Path
) -> None:
    ffn, attention = servers.afd_pair(
        deepseek_v2, connector_extra_config=extra(peer_timeout_s=FFN_PEER_TIMEOUT_S)
    )
    attention.wait_ready()
    client = StreamingClient(attention)
    os.killpg(ffn.pgid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        client.thread.join(FFN_PEER_TIMEOUT_S + 60)
        assert not client.thread.is_alive(), "the request hung on a stopped FFN"
        assert client.error is not None, "generation finished without its FFN"
        assert client.ended is not None
        failed_after = client.ended - stopped
        assert FFN_PEER_TIMEOUT_S - 1 <= failed_after <= FFN_PEER_TIMEOUT_S + 20, (
            f"the request failed {failed_after:.1f}s after the FFN stopped"
        )
        assert_exits(attention, EXIT_WITHIN_S, "after its FFN stopped answering")
        log = attention.log_text()
        assert "AFDPeerError: AFD attention rank 0 failed" in log, attention.log_tail()
        assert "with ffn rank 0 (pid" in log
        assert f"no answer within {FFN_PEER_TIMEOUT_S:.0f}s (peer_timeout_s)" in log
    finally:
        os.killpg(ffn.pgid, signal.SIGCONT)
    # Resumed, the FFN finds its attention server gone and ends by itself.
    assert_exits(ffn, EXIT_WITHIN_S, "after it resumed without its attention server")


# -- a deployment shared by a client hang-up, then an idle stop ---------------

IDLE_PEER_TIMEOUT_S = 5.0


@dataclass
class Pair:
    ffn: VllmServer
    attention: VllmServer


@pytest.fixture(scope="module")
def idle_pair(
    tmp_path_factory: pytest.TempPathFactory, deepseek_v2: Path
) -> Iterator[Pair]:
    """One 1A1F deployment: the hang-up test leaves it serving, the idle-stop
    test (after it in this file) ends it."""
    started = VllmServers(tmp_path_factory.mktemp("idle-pair"))
    try:
        ffn, attention = started.afd_pair(
            deepseek_v2,
            connector_extra_config=extra(peer_timeout_s=IDLE_PEER_TIMEOUT_S),
        )
        attention.wait_ready()
        yield Pair(ffn, attention)
    finally:
        problems = started.stop_all()
    assert not problems, "; ".join(problems)


def test_a_client_disconnecting_mid_stream_leaves_the_deployment_serving(
    idle_pair: Pair,
) -> None:
    attention = idle_pair.attention
    before = attention.complete_each(CHECK_PROMPTS, CHECK_TOKENS)
    connection = http.client.HTTPConnection(HOST, attention.port, timeout=120)
    connection.request(
        "POST",
        "/v1/completions",
        body=json.dumps(completion_body(attention, PROMPTS)),
        headers={"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    assert response.status == 200, response.read()
    chunks = 0
    while chunks < 5:
        line = response.readline()
        assert line, "the stream ended before five chunks"
        if line.startswith(b"data: {"):
            chunks += 1
    assert running_requests(attention) > 0, "the request was not running"
    response.close()
    connection.close()  # hang up mid-stream

    deadline = time.monotonic() + 30
    while running_requests(attention) > 0:
        assert time.monotonic() < deadline, "the abandoned request kept running"
        time.sleep(0.5)
    assert attention.complete_each(CHECK_PROMPTS, CHECK_TOKENS) == before
    assert idle_pair.ffn.exit_code() is None, idle_pair.ffn.log_tail()
    assert attention.exit_code() is None, attention.log_tail()


def test_attention_sigstopped_is_idle_to_the_ffn_until_it_dies(
    idle_pair: Pair,
) -> None:
    ffn, attention = idle_pair.ffn, idle_pair.attention
    assert attention.complete_each(CHECK_PROMPTS[:1], 4)  # serving, then idle
    holder = tree_pids(attention)
    os.killpg(attention.pgid, signal.SIGSTOP)
    try:
        time.sleep(2 * IDLE_PEER_TIMEOUT_S + 2)
        assert ffn.exit_code() is None, (
            f"the FFN ended while its attention server was stopped and idle\n"
            f"{ffn.log_tail()}"
        )
        assert "FFN daemon stops" not in ffn.log_text()
    finally:
        os.killpg(attention.pgid, signal.SIGKILL)
    killed = time.monotonic()
    assert_exits(ffn, EXIT_WITHIN_S, "after its attention server died")
    assert time.monotonic() - killed < EXIT_WITHIN_S
    log = ffn.log_text()
    assert "afd-plugin: FFN server stops: AFD ffn rank 0 failed" in log, ffn.log_tail()
    assert "the connection to the peer is lost" in log
    assert any(f"with attention rank 0 (pid {pid} " in log for pid in holder), (
        holder,
        ffn.log_tail(),
    )


# -- a peer killed at the rendezvous, or during teardown --------------------------

RENDEZVOUS_TIMEOUT_S = 30.0


def test_a_peer_killed_during_rendezvous_fails_the_other_fast(
    servers: VllmServers, deepseek_v2: Path
) -> None:
    port = free_port()
    timeouts = {"rendezvous_timeout_s": RENDEZVOUS_TIMEOUT_S}
    ffn = servers.start(
        "ffn", deepseek_v2, afd_config("ffn", port, connector_extra_config=timeouts)
    )
    deadline = time.monotonic() + 300
    while not listens_on(ffn, port):  # the FFN waits at its rendezvous now
        assert ffn.exit_code() is None, ffn.log_tail()
        assert time.monotonic() < deadline, "the FFN never opened its rendezvous"
        time.sleep(0.2)
    waiting = time.monotonic()
    attention = servers.start(
        "attention",
        deepseek_v2,
        afd_config("attention", port, connector_extra_config=timeouts),
    )
    time.sleep(3)
    assert attention.exit_code() is None, attention.log_tail()
    assert "joined the AFD world" not in attention.log_text()
    os.killpg(attention.pgid, signal.SIGKILL)  # before it reaches the rendezvous

    left = waiting + RENDEZVOUS_TIMEOUT_S + EXIT_WITHIN_S - time.monotonic()
    code = assert_exits(ffn, left, "past its rendezvous_timeout_s")
    assert code != 0, ffn.log_tail()
    took = time.monotonic() - waiting
    assert took >= RENDEZVOUS_TIMEOUT_S - 2, f"the FFN gave up after {took:.1f}s"
    log = ffn.log_text()
    assert (
        f"AFD ffn rank 0: these peers never arrived at the AFD rendezvous "
        f"{HOST}:{port} within {RENDEZVOUS_TIMEOUT_S:.0f}s (rendezvous_timeout_s): "
        "attention rank 0"
    ) in log, ffn.log_tail()


def test_a_peer_killed_during_teardown_leaves_nothing_behind(
    servers: VllmServers, deepseek_v2: Path
) -> None:
    ffn, attention = servers.afd_pair(deepseek_v2)
    attention.wait_ready()
    assert attention.complete_each(CHECK_PROMPTS[:1], 4)
    os.killpg(attention.pgid, signal.SIGTERM)
    os.killpg(ffn.pgid, signal.SIGKILL)
    stopped = time.monotonic()
    assert_exits(ffn, 10, "after SIGKILL")
    assert_exits(attention, EXIT_WITHIN_S, "after SIGTERM with its FFN killed")
    assert time.monotonic() - stopped < EXIT_WITHIN_S
    run_id = servers.manager.run_id
    groups = {ffn.pgid: "ffn", attention.pgid: "attention"}
    deadline = time.monotonic() + 10
    while True:
        left = scan_marked(run_id, groups)
        described = [f"pid {t.pid} {t.name}: {' '.join(t.cmdline)}" for t in left]
        for target in left:
            target.close()
        if not described or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not described, f"left behind: {described}"


def engine_processes(server: VllmServer) -> int:
    """How many of the server's children are engine cores (spawned workers)."""
    try:
        children = psutil.Process(server.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    count = 0
    for child in children:
        try:
            count += any("spawn_main" in part for part in child.cmdline())
        except psutil.NoSuchProcess:
            continue
    return count


def test_a_server_told_to_stop_while_its_engines_start_stops(
    servers: VllmServers, deepseek_v2: Path
) -> None:
    """SIGTERM reaches an attention server with two data-parallel engines while
    they start (they wait for an FFN that never comes): the server and its
    engines are gone within the grace, with no SIGKILL. vLLM 0.32.0 by itself
    drops that interrupt and waits 600 s for the engines it just lost
    (``afd_plugin.patches.startup_interrupt``)."""
    attention = servers.start(
        "attention",
        deepseek_v2,
        afd_config("attention", free_port(), num_attention_ranks=2),
        [
            "--data-parallel-size",
            "2",
            "--data-parallel-rpc-port",
            str(free_port()),
            "--distributed-executor-backend",
            "uni",
        ],
    )
    deadline = time.monotonic() + 300
    while engine_processes(attention) < 2:
        assert attention.exit_code() is None, attention.log_tail()
        assert time.monotonic() < deadline, "its engines never started"
        time.sleep(0.2)
    time.sleep(2)  # the engines are loading; the server waits for them
    assert attention.exit_code() is None, attention.log_tail()

    record = attention.stop()
    assert not record.escalated, (record.problems(), attention.log_tail())
    assert not record.problems(), record.problems()
    assert record.duration_s < EXIT_WITHIN_S
