# SPDX-License-Identifier: Apache-2.0
"""Standby FFN servers at the AFD rendezvous, over real sockets: only the
deployment's own standbys take a place (secret, place count), a waiting
standby holds no rank and writes no rank's records, a failover promotes one
waiting standby per dead rank (every attention rank of it gets the same),
fences the silent holder off, and a standby lost while waiting is reported
and counted, one that shuts down in order is not.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from afd_e2e.launch.plan import free_port
from afd_plugin import metrics, metrics_file
from afd_plugin.connectors import rendezvous as rdzv
from afd_plugin.connectors.base import AFDPeerError
from afd_plugin.rendezvous_protocol import (
    Join,
    Promotion,
    new_nonce,
    promotion_key,
    standby_left_key,
)

SECRET = b"a-deployment-secret-of-32-bytes!"
TIMEOUT = timedelta(seconds=5)
WORLD = 3
"""FFN rank 0 (global 0), attention ranks 0 and 1 (global 1, 2)."""


def member(rank: int, pid: int) -> Join:
    role, role_rank = ("ffn", 0) if rank == 0 else ("attention", rank - 1)
    return Join(rank, WORLD, pid, role, role_rank, new_nonce(), "")


def standby(pid: int) -> Join:
    return Join(0, WORLD, pid, "ffn", 0, new_nonce(), "", standby=True)


class Deployment:
    """A rendezvous hosted by attention rank 0 (global 1) with standby places."""

    def __init__(self, places: int, secret: bytes | None = SECRET) -> None:
        self.port = free_port()
        self.secret = secret
        self.server = rdzv.RendezvousServer(
            "127.0.0.1",
            self.port,
            WORLD,
            secret,
            f"127.0.0.1:{self.port}",
            standby_places=places,
            ffn_ranks=range(0, 1),
        )
        self.host = rdzv.HostStore(self.server, member(1, 2001), TIMEOUT)

    def join(self, who: Join, secret: bytes | None = SECRET) -> rdzv.PeerStore:
        return rdzv.PeerStore("127.0.0.1", self.port, who, secret, TIMEOUT, "127.0.0.1")


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    d = Deployment(places=2)
    yield d
    d.host.close()


def test_standbys_take_places_and_a_stray_one_is_refused(
    deployment: Deployment,
) -> None:
    first, second = deployment.join(standby(3001)), deployment.join(standby(3002))
    assert (first.slot, second.slot) == (0, 1)
    with pytest.raises(AFDPeerError, match="is one too many") as third:
        deployment.join(standby(3003))
    assert "all 2 standby places" in str(third.value)
    assert "pid 3001" in str(third.value) and "pid 3002" in str(third.value)
    # Without the deployment's secret a standby is refused before any place.
    with pytest.raises(AFDPeerError, match="authentication failed"):
        deployment.join(standby(3004), secret=b"not-the-deployment-secret-32b!!!")
    first.close()
    second.close()


def test_a_deployment_without_standby_places_refuses_a_standby() -> None:
    d = Deployment(places=0)
    try:
        with pytest.raises(AFDPeerError, match="has no standby places"):
            d.join(standby(3001))
    finally:
        d.host.close()


def test_a_waiting_standby_writes_no_rank_records(deployment: Deployment) -> None:
    waiting = deployment.join(standby(3001))
    for key in ("peer/0", "left/0", "promote/0", "standby/1"):
        with pytest.raises(RuntimeError, match="may not write|only the host promotes"):
            waiting.set(key, "x")
    waiting.set("standby/0", "its own record")
    # Nor may it ask for a failover: only an attention rank may.
    with pytest.raises(RuntimeError, match="may not ask for a failover"):
        waiting.failover(0, 0)
    waiting.close()


def test_a_failover_promotes_one_standby_and_fences_a_silent_holder(
    deployment: Deployment,
) -> None:
    ffn = deployment.join(member(0, 1001))  # alive but silent: it gets fenced
    attention_1 = deployment.join(member(2, 2002))
    first, second = deployment.join(standby(3001)), deployment.join(standby(3002))
    # Its connection is open: a standby cannot take a rank that is alive,
    # unless the asker reports it silent (no answer within peer_timeout_s).
    with pytest.raises(RuntimeError, match="a standby cannot take a rank that is"):
        deployment.host.failover(0, 0)
    promotion = deployment.host.failover(0, 0, silent=True)
    assert promotion == Promotion(rank=0, incarnation=1, slot=0, pid=3001)
    # The other attention rank of the dead FFN gets the same standby.
    assert attention_1.failover(0, 0) == promotion
    # The standby is told, and now holds the rank's records.
    assert Promotion.decode(first.get(promotion_key(0))) == promotion
    first.set("peer/0", "the promoted standby's record")
    # The fenced holder's connection is closed: it reads and writes nothing.
    with pytest.raises(RuntimeError, match="connection to the host is lost"):
        ffn.get("peer/1")
    # A stray server cannot claim the rank the standby now holds.
    with pytest.raises(AFDPeerError, match="already formed|already taken|is ending"):
        deployment.join(member(0, 1009))
    # The promoted standby dies too (its connection closes): the next
    # failover takes the next one.
    first.close()
    assert deployment.host.failover(0, 1) == Promotion(0, 2, 1, 3002)
    with pytest.raises(RuntimeError, match="no standby FFN server is waiting"):
        deployment.host.failover(0, 2, silent=True)
    for store in (ffn, attention_1, second):
        store.close()


@pytest.fixture
def counters(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        monkeypatch.setenv("AFD_METRICS", "1")
        monkeypatch.setattr(metrics_file, "claim_directory", lambda: Path(directory))
        monkeypatch.setattr(metrics, "_backend", None)
        yield Path(directory)
        monkeypatch.setattr(metrics, "_backend", None)


def lost_count() -> float:
    backend = metrics.backend()
    assert isinstance(backend, metrics_file.CounterFile)
    backend.flush()
    key = metrics_file.key("afd:standbys_lost", {"role": "attention", "rank": "0"})
    return backend._values.get(key, 0.0)


def test_a_standby_lost_while_waiting_is_reported_and_counted(
    counters: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="afd_plugin")
    d = Deployment(places=2)
    try:
        orderly, lost = d.join(standby(3001)), d.join(standby(3002))
        orderly.set(standby_left_key(0), "1")
        orderly.close()
        lost.close()  # as a SIGKILL: no leave first
        deadline = time.monotonic() + 5
        while lost_count() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lost_count() == 1
        text = caplog.text
        assert "standby 0 (pid 3001) shut down" in text
        assert "standby 1 (pid 3002) was lost while waiting" in text
        # Both places are free again; a restarted standby takes the first,
        # and it is the one a failover promotes.
        restarted = d.join(standby(3003))  # held: a dropped store closes
        assert restarted.slot == 0
        assert d.host.failover(0, 0, silent=True).pid == 3003
        restarted.close()
    finally:
        d.host.close()
