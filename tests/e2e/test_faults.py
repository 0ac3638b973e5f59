# SPDX-License-Identifier: Apache-2.0
"""Faults through real vLLM: a peer dies mid-generation or never arrives, a
bad ``additional_config``, a wrong worker class. Each fails fast and loudly.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from streaming_client import StreamingClient

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.launch.plan import free_port
from afd_e2e.processes.servers import VllmServer, VllmServers, afd_config

pytestmark = pytest.mark.e2e

FAIL_FAST_S = 30.0
EXIT_WITHIN_S = 240.0


CAM_ASYNC = {
    "connector": "CAMAsyncAFDConnector",
    "compute_gate_on_attention": True,
    "connector_extra_config": {
        "ops": "reference",
        "max_num_tokens_per_rank": 8192,
        "rendezvous_timeout_s": 300.0,
    },
}


@pytest.mark.parametrize("driver", ["control-plane", "connector-driven"])
def test_ffn_killed_mid_generation_fails_attention_fast(
    driver: str, servers: VllmServers, deepseek_v2: Path
) -> None:
    afd = CAM_ASYNC if driver == "connector-driven" else {}
    ffn, attention = servers.afd_pair(deepseek_v2, **afd)
    attention.wait_ready()
    client = StreamingClient(attention)  # returns once tokens stream
    os.killpg(ffn.pgid, signal.SIGKILL)
    killed = time.monotonic()
    assert client.join(FAIL_FAST_S), "the request hung after the FFN died"
    assert client.error is not None, "generation finished although the FFN was killed"
    code = attention.wait_exit(FAIL_FAST_S)
    assert code is not None, "the attention server is still up without its FFN"
    assert time.monotonic() - killed < FAIL_FAST_S
    log = attention.log_text()
    assert "AFDPeerError: AFD attention rank 0 failed" in log, attention.log_tail()
    assert "with ffn rank 0 (pid" in log
    assert "AFD rendezvous 127.0.0.1:" in log
    assert "the connection to the peer is lost" in log
    if driver == "control-plane":
        assert " of step " in log or "(step " in log  # the step (and layer) it hit
    else:
        assert "the combine of dispatch " in log and "(layer " in log


def test_attention_killed_mid_generation_fails_the_connector_driven_ffn_fast(
    servers: VllmServers, deepseek_v2: Path
) -> None:
    """No control plane: the FFN waits on each attention rank for its next
    dispatch, so a killed attention rank ends the FFN at once, named."""
    ffn, attention = servers.afd_pair(deepseek_v2, **CAM_ASYNC)
    attention.wait_ready()
    client = StreamingClient(attention)
    os.killpg(attention.pgid, signal.SIGKILL)
    killed = time.monotonic()
    assert client.join(FAIL_FAST_S), "the client hung after the attention server died"
    code = ffn.wait_exit(FAIL_FAST_S)
    assert code is not None, "the FFN server is still up without its attention rank"
    assert time.monotonic() - killed < FAIL_FAST_S
    log = ffn.log_text()
    assert "FFN daemon stops: AFD ffn rank 0 failed receiving dispatch" in log, (
        ffn.log_tail()
    )
    assert "with attention rank 0 (pid" in log
    assert "the connection to the peer is lost" in log


def test_ffn_server_answers_health_but_refuses_requests(
    servers: VllmServers, qwen3_moe: Path
) -> None:
    ffn, attention = servers.afd_pair(qwen3_moe)
    attention.wait_ready()
    ffn.wait_ready()  # /health answers on the FFN server too
    with pytest.raises(urllib.error.HTTPError):
        ffn.complete(PROMPTS[:1], max_tokens=4)
    assert ffn.wait_exit(FAIL_FAST_S) is not None, "FFN kept running"
    assert "this is an AFD ffn server" in ffn.log_text(), ffn.log_tail()
    assert "send requests to the attention server" in ffn.log_text()


class FailingServers:
    """Misconfigured servers, started together (startup dominates the cost)."""

    def __init__(self, servers: VllmServers, model: Path) -> None:
        afd = afd_config("attention", free_port())
        bad = {"afd": {**afd["afd"], "num_ffn_ranks": 0, "prot": 29650}}
        lonely = afd_config(
            "attention",
            free_port(),
            connector_extra_config={
                "rendezvous_timeout_s": 10.0,
                "peer_timeout_s": 5.0,
            },
        )
        self.bad_config = servers.start("bad-config", model, bad)
        self.wrong_worker = servers.start(
            "wrong-worker",
            model,
            afd,
            ["--worker-cls", "vllm.v1.worker.cpu_worker.CPUWorker"],
        )
        self.no_ffn = servers.start("no-ffn", model, lonely)
        self.all = [self.bad_config, self.wrong_worker, self.no_ffn]
        self.codes = {s.name: s.wait_exit(EXIT_WITHIN_S) for s in self.all}


@pytest.fixture(scope="module")
def failing(
    tmp_path_factory: pytest.TempPathFactory, deepseek_v2: Path
) -> Iterator[FailingServers]:
    started = VllmServers(tmp_path_factory.mktemp("failing"))
    try:
        yield FailingServers(started, deepseek_v2)
    finally:
        problems = started.stop_all()
    assert not problems, "; ".join(problems)


def _assert_failed(server: VllmServer, failing: FailingServers) -> str:
    code = failing.codes[server.name]
    assert code is not None, f"{server.name} still running\n{server.log_tail()}"
    assert code != 0, f"{server.name} exited 0\n{server.log_tail()}"
    return server.log_text()


def test_bad_additional_config_exits_naming_every_field(
    failing: FailingServers,
) -> None:
    log = _assert_failed(failing.bad_config, failing)
    assert "additional_config.afd.num_ffn_ranks" in log
    assert "additional_config.afd.prot: unknown field" in log


def test_non_afd_worker_class_with_afd_config_is_an_error(
    failing: FailingServers,
) -> None:
    log = _assert_failed(failing.wrong_worker, failing)
    assert "parallel_config.worker_cls" in log
    assert "'vllm.v1.worker.cpu_worker.CPUWorker' is not an AFD attention worker" in log


def test_attention_without_ffn_fails_after_rendezvous_timeout(
    failing: FailingServers,
) -> None:
    log = _assert_failed(failing.no_ffn, failing)
    assert "AFD attention rank 0 could not reach the AFD rendezvous" in log
    assert "within 10s (rendezvous_timeout_s)" in log
    assert "ffn rank 0" in log
