# SPDX-License-Identifier: Apache-2.0
"""The AFD rendezvous lets in only its own deployment, through real vLLM.

One 1A1F deployment with a rendezvous secret (``secret_env``) serves every
test: no socket of either role listens off loopback; a stray attention server
without the secret, or with a wrong one, is refused and ends; a stray with the
right secret arriving at the formed world fails fast naming the holder; and
the deployment answers the same greedy tokens throughout.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.processes.servers import VllmServer, VllmServers

pytestmark = pytest.mark.e2e

SECRET_ENV = "AFD_E2E_RENDEZVOUS_SECRET"
RENDEZVOUS_HOST = "127.0.0.1"
STRAY_RENDEZVOUS_TIMEOUT_S = 10.0
"""A refused stray must not wait for this; its own exit is bounded by it."""
FAIL_FAST_S = 10.0
"""The issue's bound: a stray second attention server fails within 10 s."""
EXIT_AFTER_REFUSAL_S = 30.0
"""A refused server's own shutdown (vLLM's engine and API server) is bounded."""
STARTUP_S = 300.0
"""How long a stray may take to load before it reaches the rendezvous."""
LOADED = "Loading weights took"
"""The stray's last log line before its worker goes to the rendezvous."""
CHECK_PROMPTS = PROMPTS[:3]
MAX_TOKENS = 12


@dataclass
class Deployment:
    servers: VllmServers
    ffn: VllmServer
    attention: VllmServer
    model: Path
    secret: str
    before: list[list[int]]
    """Greedy tokens of ``CHECK_PROMPTS`` once it was up."""

    @property
    def afd(self) -> dict[str, Any]:
        return afd_of(self.attention)

    @property
    def port(self) -> int:
        return int(self.afd["port"])

    @property
    def address(self) -> str:
        return f"{RENDEZVOUS_HOST}:{self.port}"

    def tokens(self) -> list[list[int]]:
        return self.attention.complete_each(CHECK_PROMPTS, MAX_TOKENS)

    def stray(
        self,
        name: str,
        env: dict[str, str] | None = None,
        *,
        secret_env: bool = True,
        rendezvous_timeout_s: float = STRAY_RENDEZVOUS_TIMEOUT_S,
    ) -> VllmServer:
        """A second attention server with the deployment's additional_config
        (rendezvous timeout aside; no ``secret_env`` unless asked)."""
        afd = copy.deepcopy(self.afd)
        afd["connector_extra_config"]["rendezvous_timeout_s"] = rendezvous_timeout_s
        if not secret_env:
            del afd["secret_env"]
        return self.servers.start(name, self.model, {"afd": afd}, env=env)


def afd_of(server: VllmServer) -> dict[str, Any]:
    argv = server.argv
    return json.loads(argv[argv.index("--additional-config") + 1])["afd"]


def tree(server: VllmServer) -> list[psutil.Process]:
    root = psutil.Process(server.pid)
    return [root, *root.children(recursive=True)]


def listening(server: VllmServer) -> set[tuple[str, int, int]]:
    """``(address, port, pid)`` of every LISTEN TCP socket (IPv4 and IPv6) of
    each process in the server's process tree."""
    found = set()
    for process in tree(server):
        try:
            connections = process.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN:
                found.add((conn.laddr.ip, conn.laddr.port, process.pid))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@dataclass
class Watched:
    """When a stray's log first showed each marker, and when it exited
    (``time.monotonic()``; None: not seen)."""

    seen: dict[str, float]
    exited: float | None
    code: int | None


def watch(
    strays: Sequence[VllmServer], markers: Sequence[str], timeout_s: float
) -> dict[str, Watched]:
    """Poll the strays' logs and exits together until all exited or timeout."""
    out = {s.name: Watched({}, None, None) for s in strays}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for server in strays:
            state = out[server.name]
            if state.exited is not None:
                continue
            code = server.exit_code()
            now = time.monotonic()
            log = server.log_text()
            for marker in markers:
                if marker in log:
                    state.seen.setdefault(marker, now)
            if code is not None:
                state.exited, state.code = now, code
        if all(s.exited is not None for s in out.values()):
            break
        time.sleep(0.1)
    return out


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, deepseek_v2: Path
) -> Iterator[Deployment]:
    started = VllmServers(tmp_path_factory.mktemp("secured"))
    secret = secrets.token_hex(24)
    try:
        ffn, attention = started.afd_pair(
            deepseek_v2,
            env={SECRET_ENV: secret},
            secret_env=SECRET_ENV,
            connector_extra_config={"rendezvous_timeout_s": 300.0},
        )
        attention.wait_ready()
        ffn.wait_ready()
        before = attention.complete_each(CHECK_PROMPTS, MAX_TOKENS)
        yield Deployment(started, ffn, attention, deepseek_v2, secret, before)
    finally:
        problems = started.stop_all()
    assert not problems, "; ".join(problems)


def assert_still_serving(deployment: Deployment) -> None:
    assert deployment.ffn.exit_code() is None, deployment.ffn.log_tail()
    assert deployment.attention.exit_code() is None, deployment.attention.log_tail()
    assert deployment.tokens() == deployment.before, (
        "the deployment answers differently after the stray"
    )


def test_no_socket_of_either_role_listens_off_loopback(
    deployment: Deployment,
) -> None:
    ffn = listening(deployment.ffn)
    attention = listening(deployment.attention)
    off_loopback = [
        (role, address, port, pid)
        for role, found in (("ffn", ffn), ("attention", attention))
        for address, port, pid in sorted(found)
        if not is_loopback(address)
    ]
    assert not off_loopback, f"listening off loopback: {off_loopback}"
    # Not vacuous: the rendezvous and each API server were found, exactly there.
    rendezvous = {a for a, port, _ in ffn if port == deployment.port}
    assert rendezvous == {RENDEZVOUS_HOST}, (
        f"rendezvous port {deployment.port} listens on {rendezvous or 'nothing'}; "
        f"ffn sockets: {sorted(ffn)}"
    )
    assert (RENDEZVOUS_HOST, deployment.ffn.port) in {(a, p) for a, p, _ in ffn}
    assert (RENDEZVOUS_HOST, deployment.attention.port) in {
        (a, p) for a, p, _ in attention
    }
    # The attention server hosts no rendezvous of its own.
    assert deployment.port not in {p for _, p, _ in attention}


def test_a_peer_without_the_secret_is_refused_and_changes_nothing(
    deployment: Deployment,
) -> None:
    assert deployment.tokens() == deployment.before
    auth_refusals = deployment.ffn.counter(
        "afd:rendezvous_refusals_total", reason="auth"
    )
    unset = deployment.stray("stray-unset")  # secret_env names an unset variable
    no_secret = deployment.stray("stray-no-secret", secret_env=False)
    wrong = deployment.stray("stray-wrong-secret", {SECRET_ENV: secrets.token_hex(24)})
    refusals = {
        no_secret.name: "requires the deployment's secret and this server has none",
        wrong.name: f"authentication failed at the AFD rendezvous {deployment.address}",
    }
    watched = watch([unset, no_secret, wrong], [LOADED, *refusals.values()], STARTUP_S)
    for stray in (unset, no_secret, wrong):
        state = watched[stray.name]
        assert state.exited is not None, f"{stray.name} still up\n{stray.log_tail()}"
        assert state.code != 0, f"{stray.name} exited 0\n{stray.log_tail()}"

    # The variable secret_env names is unset: a config error at start.
    log = unset.log_text()
    unset_secret = (
        f"the environment variable {SECRET_ENV} holding the rendezvous secret is "
        "not set"
    )
    assert "additional_config.afd.secret_env" in log, unset.log_tail()
    assert unset_secret in log, unset.log_tail()
    assert LOADED not in log, "the stray without its secret loaded the model"

    for stray in (no_secret, wrong):
        log = stray.log_text()
        state = watched[stray.name]
        assert refusals[stray.name] in log, stray.log_tail()
        assert deployment.address in log
        assert "AFDPeerError" in log
        assert "joined the AFD world" not in log
        # Refused at once (its model loaded just before it went to the
        # rendezvous), not after its rendezvous_timeout_s; then it ends.
        assert LOADED in state.seen, stray.log_tail()
        assert state.exited is not None
        refused = state.seen[refusals[stray.name]] - state.seen[LOADED]
        assert refused < STRAY_RENDEZVOUS_TIMEOUT_S / 2, (
            f"{stray.name} was refused {refused:.1f}s after loading"
        )
        ended = state.exited - state.seen[refusals[stray.name]]
        assert ended < EXIT_AFTER_REFUSAL_S, (
            f"{stray.name} ended {ended:.1f}s after its refusal"
        )
    # The host itself refused the wrong proof (not only the client bowing out).
    refused = re.findall(
        f"the AFD rendezvous at {re.escape(deployment.address)} refused a peer "
        r"without the deployment's secret \(claiming attention rank 0 \(pid (\d+)\)",
        deployment.ffn.log_text(),
    )
    assert refused, deployment.ffn.log_tail()
    assert {int(pid) for pid in refused} <= wrong.pids(), (refused, wrong.pids())
    # And counted it on its /metrics, once per refused connection.
    counted = deployment.ffn.counter("afd:rendezvous_refusals_total", reason="auth")
    assert counted - auth_refusals == len(refused), (counted, auth_refusals, refused)
    assert_still_serving(deployment)


FORMED = re.compile(
    r"the AFD world at (?P<address>\S+) is already formed \(ffn rank 0 \(pid "
    r"(?P<ffn>\d+)\), attention rank 0 \(pid (?P<attention>\d+)\)\); attention "
    r"rank 0 \(pid (?P<late>\d+)\) arrived late: is another deployment using "
    r"additional_config\.afd\.port (?P<port>\d+)\?"
)


def test_a_stray_second_attention_server_fails_fast_naming_the_holder(
    deployment: Deployment,
) -> None:
    holder = {p.pid for p in tree(deployment.attention)}
    ffn_pids = {p.pid for p in tree(deployment.ffn)}
    admissions = "afd:rendezvous_refusals_total"
    refused_before = deployment.ffn.counter(admissions, reason="admission")
    # Its rendezvous timeout is long: only a refusal ends it fast.
    stray = deployment.stray(
        "stray-second-attention",
        {SECRET_ENV: deployment.secret},
        rendezvous_timeout_s=300.0,
    )
    state = watch([stray], [LOADED, "already formed"], STARTUP_S)[stray.name]
    assert state.exited is not None, f"the stray is still up\n{stray.log_tail()}"
    assert state.code != 0, stray.log_tail()
    log = stray.log_text()
    match = FORMED.search(log)
    assert match, stray.log_tail()
    assert match["address"] == deployment.address
    assert int(match["port"]) == deployment.port
    assert int(match["attention"]) in holder, (match["attention"], holder)
    assert int(match["ffn"]) in ffn_pids, (match["ffn"], ffn_pids)
    assert int(match["late"]) in stray.pids(), (match["late"], stray.pids())
    assert "AFDPeerError" in log
    # Gone within 10 s of reaching the rendezvous (its model loaded just
    # before it went there), refusal and vLLM's shutdown included.
    assert LOADED in state.seen, stray.log_tail()
    refused = state.seen["already formed"] - state.seen[LOADED]
    took = state.exited - state.seen[LOADED]
    assert took < FAIL_FAST_S, (
        f"the stray ended {took:.1f}s after loading (refused after {refused:.1f}s)"
    )
    refused_after = deployment.ffn.counter(admissions, reason="admission")
    assert refused_after - refused_before == 1, (refused_before, refused_after)
    assert_still_serving(deployment)
