# SPDX-License-Identifier: Apache-2.0
"""The rendezvous protocol (pure): the challenge-response over the shared
secret, frame bounds, and strict decoding of every message and record a peer
controls, fuzzed: only ``RendezvousProtocolError``, never another exception
or an unbounded read.
"""

from __future__ import annotations

import contextlib
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from afd_plugin.errors import AFDConfigError
from afd_plugin.rendezvous_protocol import (
    MAX_FRAME_BYTES,
    NONCE_BYTES,
    Answer,
    Hello,
    Join,
    PeerRecord,
    RendezvousProtocolError,
    Reply,
    Request,
    client_proof,
    decode_body,
    encode_frame,
    exposure_warning,
    frame_length,
    is_loopback,
    load_secret,
    owner_of,
    proof_matches,
    refuse,
    reply_error,
    reply_ok,
    server_proof,
    welcome,
)

SECRET = b"s" * 32
SPEC = {
    "hidden_size": 64,
    "dtype": "bfloat16",
    "router_dtype": "float32",
    "stages": 1,
    "layers": [{"layer": 0, "kind": "moe", "router_logits": 0}],
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=True)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=20,
)


def join(**change: object) -> Join:
    fields = {
        "rank": 1,
        "world_size": 2,
        "pid": 42,
        "role": "attention",
        "role_rank": 0,
        "nonce": b"n" * NONCE_BYTES,
        "proof": "",
    }
    return Join(**{**fields, **change})  # type: ignore[arg-type]


def test_the_proofs_need_the_secret_and_differ_by_direction() -> None:
    challenge, nonce = b"c" * NONCE_BYTES, b"n" * NONCE_BYTES
    mine = client_proof(SECRET, challenge, nonce)
    assert proof_matches(mine, client_proof(SECRET, challenge, nonce))
    assert not proof_matches(mine, client_proof(b"t" * 32, challenge, nonce))
    # A fresh challenge makes a recorded proof useless (no replay).
    assert not proof_matches(mine, client_proof(SECRET, b"d" * NONCE_BYTES, nonce))
    # The server's answer is not the client's proof echoed back.
    assert server_proof(SECRET, challenge, nonce) != mine


def test_messages_round_trip() -> None:
    hello = Hello(b"c" * NONCE_BYTES, True)
    assert Hello.decode(decode_body(encode_frame(hello.encode())[4:])) == hello
    j = join(proof="ab" * 32)
    assert Join.decode(j.encode()) == j
    assert Answer.decode(welcome("p")) == Answer(True, "p")
    assert Answer.decode(refuse("why", retry=True)) == Answer(False, "why", True)
    r = Request("wait", ("a", "b"), b"\x00\xff", 3, 1500)
    assert Request.decode(r.encode()) == r
    assert Reply.decode(reply_ok(b"v", 7)) == Reply(True, b"v", 7)
    assert Reply.decode(reply_error("no", True)) == Reply(
        False, error="no", timed_out=True
    )
    record = PeerRecord("ffn", 0, "127.0.0.1", 9, "m", SPEC)
    assert PeerRecord.decode(record.encode()) == record


def test_an_oversized_frame_is_refused_before_reading_it() -> None:
    assert frame_length(struct.pack(">I", MAX_FRAME_BYTES)) == MAX_FRAME_BYTES
    with pytest.raises(RendezvousProtocolError, match="exceeds"):
        frame_length(struct.pack(">I", MAX_FRAME_BYTES + 1))
    with pytest.raises(RendezvousProtocolError, match="exceeds"):
        encode_frame({"value": "x" * MAX_FRAME_BYTES})


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"role": "router"}, "role"),
        ({"rank": -1}, "rank"),
        ({"rank": True}, "boolean"),
        ({"world_size": 0}, "world_size"),
        ({"nonce": "zz"}, "hex"),
        ({"nonce": "ab"}, "32 bytes"),
        ({"protocol": "afd-rendezvous/0"}, "not afd-rendezvous/1"),
    ],
)
def test_a_bad_join_is_refused_naming_the_field(change: dict, needle: str) -> None:
    with pytest.raises(RendezvousProtocolError, match=needle):
        Join.decode({**join().encode(), **change})


def test_only_a_rank_writes_its_own_records() -> None:
    assert owner_of("peer/3") == 3
    assert owner_of("left/0") == 0
    assert owner_of("peer/x") == -1  # malformed: nobody's
    assert owner_of("gloo/0/1") is None
    assert owner_of("shm/ring") is None


def test_requests_name_their_keys() -> None:
    base = Request("get", ("k",)).encode()
    for bad in ({"keys": []}, {"keys": ["a", "b"]}, {"keys": [""]}, {"op": "eval"}):
        with pytest.raises(RendezvousProtocolError):
            Request.decode({**base, **bad})
    with pytest.raises(RendezvousProtocolError, match="base64"):
        Request.decode({**base, "value": "***"})


def test_a_peer_record_must_hold_a_full_spec() -> None:
    good = json.loads(PeerRecord("ffn", 0, "h", 1, "m", SPEC).encode())
    for broken in (
        {**good, "spec": {**SPEC, "layers": [{"layer": 0}]}},
        {**good, "spec": {k: v for k, v in SPEC.items() if k != "dtype"}},
        {**good, "peer": {**good["peer"], "pid": "1"}},
    ):
        with pytest.raises(RendezvousProtocolError):
            PeerRecord.decode(json.dumps(broken).encode())


# -- fuzzing: what a peer (or a stranger) sends ------------------------------


@settings(max_examples=300, deadline=1000)
@given(st.binary(max_size=512))
def test_garbage_frames_raise_only_the_protocol_error(data: bytes) -> None:
    """Would catch: a decoder crashing (KeyError, TypeError, UnicodeError) on
    bytes a stranger sends before it is refused."""
    for decode in (
        Hello.decode,
        Join.decode,
        Answer.decode,
        Request.decode,
        Reply.decode,
    ):
        with contextlib.suppress(RendezvousProtocolError):
            decode(decode_body(data))
    with contextlib.suppress(RendezvousProtocolError):
        PeerRecord.decode(data)


@settings(max_examples=400, deadline=1000)
@given(
    st.sampled_from(["hello", "join", "answer", "request", "reply", "record"]),
    st.dictionaries(
        st.sampled_from(
            [
                "protocol",
                "type",
                "challenge",
                "auth",
                "rank",
                "world_size",
                "pid",
                "role",
                "role_rank",
                "nonce",
                "proof",
                "reason",
                "retry",
                "op",
                "keys",
                "value",
                "amount",
                "timeout_ms",
                "ok",
                "number",
                "error",
                "timed_out",
                "peer",
                "spec",
            ]
        ),
        json_values,
        max_size=12,
    ),
)
def test_well_typed_garbage_raises_only_the_protocol_error(
    kind: str, message: dict
) -> None:
    """Would catch: a field read without its type or bound checked (an int
    where a list was expected, a nested dict where a string was)."""
    message.setdefault("protocol", "afd-rendezvous/1")
    decoders = {
        "hello": Hello.decode,
        "join": Join.decode,
        "answer": Answer.decode,
        "request": Request.decode,
        "reply": Reply.decode,
        "record": lambda m: PeerRecord.decode(json.dumps(m).encode()),
    }
    with contextlib.suppress(RendezvousProtocolError):
        decoders[kind](message)


# -- the secret ---------------------------------------------------------------


def test_the_secret_comes_from_the_named_env_var_or_file(tmp_path: Path) -> None:
    assert load_secret(None, None, {}) is None
    assert load_secret("AFD_SECRET", None, {"AFD_SECRET": "x" * 16}) == b"x" * 16
    path = tmp_path / "secret"
    path.write_text("y" * 20 + "\n")
    assert load_secret(None, str(path), {}) == b"y" * 20


@pytest.mark.parametrize(
    ("env", "file", "needle", "field"),
    [
        (
            "AFD_SECRET",
            None,
            "AFD_SECRET holding the rendezvous secret is not set",
            "secret_env",
        ),
        (None, "/nonexistent/afd-secret", "cannot read", "secret_file"),
        ("AFD_SECRET", "/x", "not both", "secret_file"),
    ],
)
def test_a_missing_or_short_secret_names_its_field(
    env: str | None, file: str | None, needle: str, field: str
) -> None:
    with pytest.raises(AFDConfigError, match=needle) as info:
        load_secret(env, file, {})
    with pytest.raises(AFDConfigError, match="at least 16 bytes, got 3"):
        load_secret("AFD_SECRET", None, {"AFD_SECRET": "abc"})
    assert info.value.paths == (f"additional_config.afd.{field}",)


def test_loopback_names() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "localhost", "::1"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "example.org"))


def test_an_exposed_rendezvous_without_a_secret_is_warned_about() -> None:
    warning = exposure_warning("10.1.2.3", 29650, has_secret=False)
    assert warning is not None
    assert "10.1.2.3:29650, which is not loopback" in warning
    assert "secret_env or secret_file" in warning
    assert exposure_warning("10.1.2.3", 29650, has_secret=True) is None
    assert exposure_warning("127.0.0.1", 29650, has_secret=False) is None
