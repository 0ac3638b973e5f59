# SPDX-License-Identifier: Apache-2.0
"""Standby FFN servers through real vLLM, the faults around them: a stray
server claiming to be a standby is refused (without the deployment's secret,
or with it when every standby place is taken) and ends; a standby SIGKILLed
while it waits is reported by the rendezvous host (attention rank 0: a log
line and ``afd:standbys_lost_total``) and the deployment keeps serving the
same greedy tokens.

One 1A1F deployment with one standby and a rendezvous secret serves every
test, in file order.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.launch.plan import free_port
from afd_e2e.processes.servers import VllmServer, VllmServers, afd_config

pytestmark = pytest.mark.e2e

SECRET_ENV = "AFD_E2E_RENDEZVOUS_SECRET"
CHECK_PROMPTS = PROMPTS[:3]
MAX_TOKENS = 12
STRAY_EXIT_S = 300.0
"""A stray loads its model before it reaches the rendezvous, then ends."""
REPORTED_S = 30.0


@dataclass
class Deployment:
    servers: VllmServers
    ffn: VllmServer
    standby: VllmServer
    attention: VllmServer
    model: Path
    secret: str
    before: list[list[int]]

    def tokens(self) -> list[list[int]]:
        return self.attention.complete_each(CHECK_PROMPTS, MAX_TOKENS)

    def stray_standby(self, name: str, secret: str | None) -> VllmServer:
        """Another standby FFN server with the standby's own config."""
        argv = self.standby.argv
        config = copy.deepcopy(json.loads(argv[argv.index("--additional-config") + 1]))
        config["afd"]["connector_extra_config"]["rendezvous_timeout_s"] = 10.0
        env = {SECRET_ENV: secret} if secret is not None else {}
        if secret is None:
            del config["afd"]["secret_env"]
        return self.servers.start(name, self.model, config, env=env)


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, deepseek_v2: Path
) -> Iterator[Deployment]:
    started = VllmServers(tmp_path_factory.mktemp("standby"))
    secret = secrets.token_hex(24)
    env = {SECRET_ENV: secret}
    port = free_port()
    common: dict[str, Any] = {
        "secret_env": SECRET_ENV,
        "num_ffn_standby": 1,
        "connector_extra_config": {"rendezvous_timeout_s": 300.0},
    }
    try:
        ffn = started.start(
            "ffn", deepseek_v2, afd_config("ffn", port, **common), env=env
        )
        standby = started.start(
            "standby",
            deepseek_v2,
            afd_config("ffn", port, standby=True, **common),
            env=env,
        )
        attention = started.start(
            "attention", deepseek_v2, afd_config("attention", port, **common), env=env
        )
        for server in (attention, ffn, standby):
            server.wait_ready()
        before = attention.complete_each(CHECK_PROMPTS, MAX_TOKENS)
        yield Deployment(started, ffn, standby, attention, deepseek_v2, secret, before)
    finally:
        problems = started.stop_all()
    assert not problems, "; ".join(problems)


def wait_exit(server: VllmServer, timeout_s: float) -> int | None:
    code = server.wait_exit(timeout_s)
    assert code is not None, f"{server.name} still up\n{server.log_tail()}"
    return code


def test_a_stray_standby_is_refused_and_changes_nothing(
    deployment: Deployment,
) -> None:
    no_secret = deployment.stray_standby("stray-standby-no-secret", None)
    wrong = deployment.stray_standby("stray-standby-wrong", secrets.token_hex(24))
    extra = deployment.stray_standby("stray-standby-extra", deployment.secret)
    expected = {
        no_secret: "requires the deployment's secret and this server has none",
        wrong: "authentication failed at the AFD rendezvous",
        extra: "all 1 standby places of the AFD world at",
    }
    for stray, refusal in expected.items():
        assert wait_exit(stray, STRAY_EXIT_S) != 0, stray.log_tail()
        log = stray.log_text()
        assert refusal in log, stray.log_tail()
        assert "waits at the AFD rendezvous" not in log
    # The extra one names the standby holding the place (its engine's pid).
    holder = re.search(r"are taken \(standby 0 \(pid (\d+)\)", extra.log_text())
    assert holder is not None, extra.log_tail()
    assert int(holder[1]) in deployment.standby.pids()
    assert (
        deployment.attention.counter(
            "afd:rendezvous_refusals_total", reason="admission"
        )
        >= 1
    )
    assert deployment.standby.exit_code() is None, deployment.standby.log_tail()
    assert deployment.tokens() == deployment.before


def test_a_standby_killed_while_waiting_is_reported_and_serving_goes_on(
    deployment: Deployment,
) -> None:
    assert deployment.attention.counter("afd:standbys_lost_total") == 0
    deployment.standby.kill()
    deadline = time.monotonic() + REPORTED_S
    while time.monotonic() < deadline:
        if deployment.attention.counter("afd:standbys_lost_total") >= 1:
            break
        time.sleep(0.2)
    assert deployment.attention.counter("afd:standbys_lost_total") == 1
    log = deployment.attention.log_text()
    assert "was lost while waiting" in log, deployment.attention.log_tail()
    assert "0 standby(s) still waiting" in log
    assert deployment.ffn.exit_code() is None, deployment.ffn.log_tail()
    assert deployment.attention.exit_code() is None
    assert deployment.tokens() == deployment.before
