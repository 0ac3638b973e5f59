# SPDX-License-Identifier: Apache-2.0
"""P2pGlooAFDConnector between two peers (threads; a process where one must
die): one step end to end, payload framing, close / re-init, peers that die
or never come, spec checks.

Needs torch (the cpu extra, tox env e2e); no vLLM.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from typing import Any

import pytest
import torch

from afd_e2e.launch.plan import free_port
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import (
    AFDPeerError,
    ExchangeSpec,
    LayerExchange,
)
from afd_plugin.connectors.cpu.p2p_gloo import P2pGlooAFDConnector
from afd_plugin.connectors.p2p_base import TAG_CONTROL_BYTES, TAG_CONTROL_LENGTH
from afd_plugin.wire import (
    AFDControlPayload,
    AFDWireError,
    decode_payload,
    encode_payload,
)

HIDDEN = 8
EXPERTS = 4
SPEC = ExchangeSpec(
    hidden_size=HIDDEN,
    dtype="bfloat16",
    router_dtype="float32",
    layers=(LayerExchange(0, "dense", 0), LayerExchange(1, "moe", EXPERTS)),
)
TOKENS = 5


TRANSPORTS = ("gloo", "shm")


def connector(
    role: str,
    port: int,
    rendezvous: float = 30.0,
    peer: float = 10.0,
    transport: str = "auto",
) -> P2pGlooAFDConnector:
    config = AFDConfig(
        role=role,
        connector="P2pGlooAFDConnector",
        port=port,
        connector_extra_config={
            "rendezvous_timeout_s": rendezvous,
            "peer_timeout_s": peer,
            "transport": transport,
        },
    )
    return P2pGlooAFDConnector(config, 0)


def step(counts: tuple[int, ...] = (TOKENS,)) -> AFDControlPayload:
    return AFDControlPayload(stage_key=0, token_counts=counts, max_count=max(counts))


def ffn_compute(hidden: Any, logits: Any | None) -> Any:
    out = hidden * 2
    if logits is not None:
        out = out + logits.sum(-1, keepdim=True).to(out.dtype)
    return out


# -- the FFN process --------------------------------------------------------


def ffn_main(
    port: int, mode: str, rounds: int, spec: dict[str, Any], transport: str = "auto"
) -> None:
    conn = connector("ffn", port, transport=transport)
    conn.bind(ExchangeSpec.from_dict(spec))
    for _ in range(rounds):
        conn.init_afd_connector()
        conn.world_or_raise()
        if mode == "hang":
            conn.control_plane.recv_dp_metadata_list()
            time.sleep(3)  # alive, connected, silent
        elif mode == "raw-frames":
            # The frames as they travel (gloo, or the shared-memory rings).
            path = conn.control_plane.path
            length = torch.empty(1, dtype=torch.int64)
            path.recv(length, 1, TAG_CONTROL_LENGTH, "length")
            body = torch.empty(int(length.item()), dtype=torch.uint8)
            path.recv(body, 1, TAG_CONTROL_BYTES, "bytes")
            reply = body.numpy().tobytes()
            path.send(torch.frombuffer(bytearray(reply), dtype=torch.uint8), 1, 9, "r")
        else:
            payload = conn.control_plane.recv_dp_metadata_list()
            conn.update_state_from_dp_metadata(payload)
            if mode == "die":
                os._exit(3)
            for layer in (0, 1):
                hidden, extras = conn.recv_attn_output(layer, 0)
                out = ffn_compute(hidden, extras.get("router_logits"))
                conn.send_ffn_output(out, layer, 0)
        conn.close()
    conn.close()


class Peer(threading.Thread):
    """The other role, in a thread; ``error`` holds what it raised."""

    def __init__(self, target: Any, *args: Any) -> None:
        super().__init__(daemon=True)
        self.error: BaseException | None = None
        self._call = (target, args)

    def run(self) -> None:
        target, args = self._call
        try:
            target(*args)
        except BaseException as exc:  # reported to the test
            self.error = exc

    def finish(self) -> BaseException | None:
        self.join(30)
        assert not self.is_alive(), "the peer thread hung"
        return self.error


def start_ffn(
    port: int,
    mode: str = "serve",
    rounds: int = 1,
    spec: ExchangeSpec = SPEC,
    transport: str = "auto",
) -> Peer:
    peer = Peer(ffn_main, port, mode, rounds, spec.to_dict(), transport)
    peer.start()
    return peer


def attention_step(conn: P2pGlooAFDConnector) -> None:
    conn.control_plane.send_dp_metadata_list(step())
    for layer in (0, 1):
        hidden = torch.randn(TOKENS, HIDDEN).to(torch.bfloat16)
        extras = {}
        if layer == 1:
            extras["router_logits"] = torch.randn(TOKENS, EXPERTS)
        conn.send_attn_output(hidden, layer, 0, **extras)
        out = conn.recv_ffn_output(layer, 0)
        assert out.dtype == torch.bfloat16 and out.shape == hidden.shape
        expected = ffn_compute(hidden, extras.get("router_logits"))
        assert torch.equal(out, expected)


# -- tests ------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_one_step_then_close_and_reinit_on_the_same_port(transport: str) -> None:
    port = free_port()
    ffn = start_ffn(port, rounds=2, transport=transport)
    conn = connector("attention", port, transport=transport)
    conn.bind(SPEC)
    for _ in range(2):
        conn.init_afd_connector()
        assert conn.transport is not None
        kind = type(conn.transport).__name__
        assert kind == {"gloo": "GlooTransport", "shm": "ShmTransport"}[transport]
        # Control payloads travel with the data on the rings, else over gloo.
        on_rings = conn.control_plane.path is conn.transport
        assert on_rings == (transport == "shm")
        attention_step(conn)
        assert conn.step == 1
        conn.close()
        conn.close()
    assert ffn.finish() is None


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_control_payload_is_length_then_uint8_json(transport: str) -> None:
    port = free_port()
    ffn = start_ffn(port, mode="raw-frames", transport=transport)
    conn = connector("attention", port, transport=transport)
    conn.bind(SPEC)
    conn.init_afd_connector()
    sent = step((TOKENS,))
    conn.control_plane.send_dp_metadata_list(sent)
    # The attention side updated its state before sending (AFD-I10).
    assert conn.state is not None and conn.state.payload == sent
    echo = torch.empty(len(encode_payload(sent)), dtype=torch.uint8)
    conn.control_plane.path.recv(echo, 0, 9, "echo")
    assert echo.numpy().tobytes() == encode_payload(sent)
    assert decode_payload(echo.numpy().tobytes()) == sent
    conn.close()
    assert ffn.finish() is None


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_oversized_length_header_is_refused_before_reading(transport: str) -> None:
    # The FFN role runs here; the peer plays a broken attention.
    port = free_port()
    attention = Peer(bogus_attention_main, port, transport)
    attention.start()
    conn = connector("ffn", port, transport=transport)
    conn.bind(SPEC)
    conn.init_afd_connector()
    with pytest.raises(AFDWireError, match="control payload length"):
        conn.control_plane.recv_dp_metadata_list()
    conn.close()
    assert attention.finish() is None


def bogus_attention_main(port: int, transport: str) -> None:
    conn = connector("attention", port, transport=transport)
    conn.bind(SPEC)
    conn.init_afd_connector()
    length = torch.tensor([1 << 40], dtype=torch.int64)
    conn.control_plane.path.send(length, 0, TAG_CONTROL_LENGTH, "bogus")
    time.sleep(1)
    conn.close()


def test_close_is_safe_unbuilt_and_half_built() -> None:
    conn = connector("attention", free_port(), rendezvous=1.0)
    conn.close()
    conn.close()
    conn.bind(SPEC)
    with pytest.raises(AFDPeerError) as failed:
        conn.init_afd_connector()
    message = str(failed.value)
    assert "AFD attention rank 0 could not reach the AFD rendezvous" in message
    assert "within 1s (rendezvous_timeout_s)" in message
    assert "ffn rank 0" in message
    conn.close()
    conn.close()
    with pytest.raises(RuntimeError, match="not initialised"):
        conn.world_or_raise()
    # A failed attempt leaves nothing that blocks the next one.
    with pytest.raises(AFDPeerError):
        conn.init_afd_connector()
    with pytest.raises(AFDPeerError):
        conn.init_afd_connector()
    conn.close()


def test_ffn_alone_names_the_missing_attention_rank_and_can_retry() -> None:
    port = free_port()
    conn = connector("ffn", port, rendezvous=1.0)
    conn.bind(SPEC)
    for _ in range(2):  # the second attempt reuses the port of the first
        with pytest.raises(AFDPeerError) as failed:
            conn.init_afd_connector()
        message = str(failed.value)
        assert "these peers never arrived at the AFD rendezvous" in message
        assert f"attention rank 0 (AFD rendezvous 127.0.0.1:{port})" in message
    conn.close()
    conn.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_dead_ffn_is_reported_fast_with_the_peer_named(transport: str) -> None:
    port = free_port()
    ffn = mp.get_context("spawn").Process(
        target=ffn_main,
        args=(port, "die", 1, SPEC.to_dict(), transport),
        daemon=True,
    )
    ffn.start()
    conn = connector("attention", port, peer=60.0, transport=transport)
    conn.bind(SPEC)
    conn.init_afd_connector()
    conn.control_plane.send_dp_metadata_list(step())
    ffn.join(30)
    assert ffn.exitcode == 3
    started = time.monotonic()
    with pytest.raises(AFDPeerError) as failed:
        conn.send_attn_output(torch.zeros(TOKENS, HIDDEN, dtype=torch.bfloat16), 0, 0)
        conn.recv_ffn_output(0, 0)
    assert time.monotonic() - started < 10, "a dead peer waited for peer_timeout_s"
    message = str(failed.value)
    assert f"with ffn rank 0 (pid {ffn.pid} on 127.0.0.1" in message
    assert f"AFD rendezvous 127.0.0.1:{port}" in message
    assert "(step 1, layer 0, stage 0)" in message
    assert "connection to the peer is lost" in message
    conn.close()
    conn.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_silent_ffn_fails_the_step_after_peer_timeout(transport: str) -> None:
    port = free_port()
    ffn = start_ffn(port, mode="hang", transport=transport)
    conn = connector("attention", port, peer=1.0, transport=transport)
    conn.bind(SPEC)
    conn.init_afd_connector()
    conn.control_plane.send_dp_metadata_list(step())
    started = time.monotonic()
    with pytest.raises(AFDPeerError) as failed:
        # gloo completes a send only once the peer posted the receive.
        hidden = torch.zeros(TOKENS, HIDDEN, dtype=torch.bfloat16)
        conn.send_attn_output(hidden, 0, 0)
        conn.recv_ffn_output(0, 0)
    assert 0.9 < time.monotonic() - started < 5
    message = str(failed.value)
    assert "(step 1, layer 0, stage 0)" in message
    assert "with ffn rank 0 (pid" in message
    assert "no answer within 1s (peer_timeout_s)" in message
    conn.close()
    ffn.finish()


def test_roles_disagreeing_on_the_split_fail_at_rendezvous() -> None:
    port = free_port()
    other = ExchangeSpec(
        hidden_size=HIDDEN,
        dtype="bfloat16",
        router_dtype="float32",
        layers=(LayerExchange(0, "dense", 0), LayerExchange(1, "moe", 0)),
    )
    ffn = start_ffn(port, spec=other)
    conn = connector("attention", port)
    conn.bind(SPEC)
    with pytest.raises(AFDPeerError, match="do not run the same model split"):
        conn.init_afd_connector()
    conn.close()
    assert isinstance(ffn.finish(), AFDPeerError)


def test_the_connector_takes_the_configs_parsed_extra() -> None:
    """The connector builder constructs from the typed config: the extra
    config it runs with is the one object parsed with the config."""
    from afd_plugin.runtime.role import build_connector

    config = AFDConfig(
        role="ffn",
        connector="P2pGlooAFDConnector",
        connector_extra_config={"peer_timeout_s": 7},
    )
    built = build_connector(config, 0)
    assert isinstance(built, P2pGlooAFDConnector)
    assert built.extra is config.extra and built.extra.peer_timeout_s == 7
    assert built.world is None  # light: no groups, no sockets


def test_auto_takes_shared_memory_on_one_machine() -> None:
    port = free_port()
    ffn = start_ffn(port)
    conn = connector("attention", port)
    conn.bind(SPEC)
    conn.init_afd_connector()
    assert type(conn.transport).__name__ == "ShmTransport"
    attention_step(conn)
    conn.close()
    assert ffn.finish() is None


def test_shm_refuses_a_peer_on_another_machine() -> None:
    """Forced 'shm' with a peer elsewhere is a clear error, not a fallback."""
    from afd_plugin.connectors.cpu.shm_transport import choose_shm
    from afd_plugin.connectors.gloo_world import PeerInfo

    class World:
        global_rank = 1
        peers = {
            0: PeerInfo("ffn", 0, "10.0.0.2", 11, "other-host/boot"),
            1: PeerInfo("attention", 0, "10.0.0.1", 12, "this-host/boot"),
        }

        def me(self) -> str:
            return "AFD attention rank 0"

        def describe(self, rank: int) -> str:
            return f"ffn rank {rank} (pid 11 on 10.0.0.2)"

    extra = connector("attention", 1, transport="shm").extra
    with pytest.raises(AFDPeerError, match="transport is 'shm' but shared memory"):
        choose_shm(extra, World(), (0,))  # type: ignore[arg-type]
    auto = connector("attention", 1, transport="auto").extra
    assert choose_shm(auto, World(), (0,)) is False  # type: ignore[arg-type]


def test_a_block_only_partly_on_one_machine_agrees_on_the_gloo_data_path() -> None:
    """2A1F with the FFN beside attention rank 1 and attention rank 0 on
    another machine: the FFN cannot use shared memory with rank 0, so its
    block uses gloo, and attention rank 1 must choose gloo too (deciding over
    its own FFN peer alone it chose shared memory and waited for rings the FFN
    never opened). On one machine the whole block takes shared memory."""
    from afd_plugin.connectors.cpu.shm_transport import choose_shm
    from afd_plugin.connectors.gloo_world import PeerInfo

    def conn(role: str, rank: int) -> P2pGlooAFDConnector:
        config = AFDConfig(
            role=role,
            connector="P2pGlooAFDConnector",
            num_attention_ranks=2,
            num_ffn_ranks=1,
        )
        return P2pGlooAFDConnector(config, rank)

    conns = [conn("ffn", 0), conn("attention", 0), conn("attention", 1)]
    layout = conns[0].layout

    def world(me: P2pGlooAFDConnector, machines: dict[tuple[str, int], str]) -> Any:
        class World:
            global_rank = layout.global_rank(me.config.role, me.rank)
            peers = {
                layout.global_rank(role, rank): PeerInfo(role, rank, "h", 1, machine)
                for (role, rank), machine in machines.items()
            }

            def describe(self, rank: int) -> str:
                return f"rank {rank}"

        return World()

    split = {
        ("ffn", 0): "node-b",
        ("attention", 0): "node-a",
        ("attention", 1): "node-b",
    }
    attention_1 = conns[2]
    # the pair alone would share memory: the case the block rule is for
    assert choose_shm(
        attention_1.extra, world(attention_1, split), (attention_1.ffn_peer,)
    )
    assert [choose_shm(c.extra, world(c, split), c.exchange_group) for c in conns] == [
        False,
        False,
        False,
    ]
    one = dict.fromkeys(split, "node-a")
    assert [choose_shm(c.extra, world(c, one), c.exchange_group) for c in conns] == [
        True,
        True,
        True,
    ]
    attention = [layout.global_rank("attention", r) for r in (0, 1)]
    assert sorted(conns[0].exchange_group) == attention
