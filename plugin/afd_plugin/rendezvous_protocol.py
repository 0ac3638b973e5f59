# SPDX-License-Identifier: Apache-2.0
"""The AFD rendezvous protocol: frames, the join handshake (a challenge and
response over the deployment's shared secret), the store requests, and the
peer records; every message a peer sends is decoded strictly and bounded.

Pure: no torch, no sockets (``connectors/rendezvous.py`` owns those).

A connection goes: server ``hello`` (challenge, whether it wants a proof) ->
client ``join`` (its nonce, the proof, who it is) -> server ``welcome`` (its
own proof) or ``refuse`` (why, then it closes) -> requests and replies. No
record is read or written before the join is accepted, so a stranger without
the secret learns nothing and changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from afd_plugin.errors import AFDConfigError, FieldError

PROTOCOL = "afd-rendezvous/1"
MAX_FRAME_BYTES = 1 << 20
"""Upper bound of one frame; a larger announced length is refused unread."""
MAX_KEY_CHARS = 256
MAX_KEYS = 4096
MAX_RANK = 1 << 16
MAX_TIMEOUT_MS = 366 * 24 * 3600 * 1000
NONCE_BYTES = 32
MIN_SECRET_BYTES = 16
_HEADER = struct.Struct(">I")
HEADER_BYTES = _HEADER.size
OPS = ("set", "get", "wait", "check", "add", "delete", "failover")
"""Store operations, and ``failover``: an attention rank asks the host to
promote a standby in place of a dead FFN rank (key ``ffn/<global rank>``,
``amount`` the incarnation it last talked to)."""
ROLES = ("attention", "ffn")
OWNED_PREFIXES = ("peer/", "read/", "left/")
"""Keys ``<prefix><global rank>`` only that rank may write."""


class RendezvousProtocolError(ValueError):
    """A message that is not a well-formed rendezvous message."""


# -- frames -----------------------------------------------------------------


def encode_frame(message: Mapping[str, Any]) -> bytes:
    body = json.dumps(message, sort_keys=True, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise RendezvousProtocolError(
            f"a rendezvous message of {len(body)} bytes exceeds {MAX_FRAME_BYTES}"
        )
    return _HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """The body length a frame header announces; refused above the bound."""
    if len(header) != HEADER_BYTES:
        raise RendezvousProtocolError(f"a frame header is {HEADER_BYTES} bytes")
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise RendezvousProtocolError(
            f"a frame of {length} bytes exceeds {MAX_FRAME_BYTES}"
        )
    return length


def decode_body(body: bytes) -> dict[str, Any]:
    """One frame body: a JSON object."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RendezvousProtocolError(f"not a JSON message: {exc}") from None
    if not isinstance(message, dict):
        raise RendezvousProtocolError("a rendezvous message is a JSON object")
    return message


# -- field checks -----------------------------------------------------------


def _field(message: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in message:
        raise RendezvousProtocolError(f"missing field {name!r}")
    value = message[name]
    if isinstance(value, bool) and kind is not bool:
        raise RendezvousProtocolError(f"field {name!r} must not be a boolean")
    if not isinstance(value, kind):
        raise RendezvousProtocolError(f"field {name!r} has the wrong type")
    return value


def _int(message: Mapping[str, Any], name: str, low: int, high: int) -> int:
    value = _field(message, name, int)
    if not low <= value <= high:
        raise RendezvousProtocolError(f"field {name!r} must be in [{low}, {high}]")
    return value


def _hex(message: Mapping[str, Any], name: str, size: int | None) -> bytes:
    text = _field(message, name, str)
    if len(text) > 2 * NONCE_BYTES * 2:
        raise RendezvousProtocolError(f"field {name!r} is too long")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise RendezvousProtocolError(f"field {name!r} is not hex") from None
    if size is not None and len(raw) != size:
        raise RendezvousProtocolError(f"field {name!r} must be {size} bytes")
    return raw


def _key(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_KEY_CHARS:
        raise RendezvousProtocolError(
            f"a key is a string of 1 to {MAX_KEY_CHARS} characters"
        )
    return value


def _text(message: Mapping[str, Any], name: str, limit: int = 4096) -> str:
    value = _field(message, name, str)
    if len(value) > limit:
        raise RendezvousProtocolError(f"field {name!r} is too long")
    return value


def _protocol(message: Mapping[str, Any]) -> None:
    if message.get("protocol") != PROTOCOL:
        raise RendezvousProtocolError(
            f"not {PROTOCOL} (got {str(message.get('protocol'))[:40]!r})"
        )


# -- handshake --------------------------------------------------------------


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def _mac(secret: bytes, label: bytes, first: bytes, second: bytes) -> str:
    return hmac.new(secret, label + first + second, hashlib.sha256).hexdigest()


def client_proof(secret: bytes, challenge: bytes, nonce: bytes) -> str:
    """What a client sends to prove it holds the secret."""
    return _mac(secret, b"afd-rendezvous client", challenge, nonce)


def server_proof(secret: bytes, challenge: bytes, nonce: bytes) -> str:
    """What the server sends back to prove it holds the secret too."""
    return _mac(secret, b"afd-rendezvous server", nonce, challenge)


def proof_matches(expected: str, got: str) -> bool:
    return hmac.compare_digest(expected.encode(), got.encode())


@dataclass(frozen=True)
class Hello:
    """Server -> client, first: the challenge and whether a proof is needed."""

    challenge: bytes
    auth: bool

    def encode(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "type": "hello",
            "challenge": self.challenge.hex(),
            "auth": self.auth,
        }

    @classmethod
    def decode(cls, message: Mapping[str, Any]) -> Hello:
        _protocol(message)
        if message.get("type") != "hello":
            raise RendezvousProtocolError("expected the server's hello")
        return cls(
            _hex(message, "challenge", NONCE_BYTES), _field(message, "auth", bool)
        )


@dataclass(frozen=True)
class Join:
    """Client -> server: who joins (global rank, pid, role) and its proof."""

    rank: int
    world_size: int
    pid: int
    role: str
    role_rank: int
    nonce: bytes
    proof: str
    standby: bool = False
    """A standby FFN server: it takes no rank at the join (``rank`` is 0);
    the host gives it a standby place and, later, a dead rank's."""

    def encode(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "type": "join",
            "standby": self.standby,
            "rank": self.rank,
            "world_size": self.world_size,
            "pid": self.pid,
            "role": self.role,
            "role_rank": self.role_rank,
            "nonce": self.nonce.hex(),
            "proof": self.proof,
        }

    @classmethod
    def decode(cls, message: Mapping[str, Any]) -> Join:
        _protocol(message)
        if message.get("type") != "join":
            raise RendezvousProtocolError("expected a join")
        role = _text(message, "role", 16)
        if role not in ROLES:
            raise RendezvousProtocolError(f"field 'role' must be one of {ROLES}")
        proof = _text(message, "proof", 128)
        standby = _field(message, "standby", bool) if "standby" in message else False
        if standby and role != "ffn":
            raise RendezvousProtocolError("only an FFN server joins as a standby")
        return cls(
            standby=standby,
            rank=_int(message, "rank", 0, MAX_RANK),
            world_size=_int(message, "world_size", 1, MAX_RANK),
            pid=_int(message, "pid", 0, 1 << 31),
            role=role,
            role_rank=_int(message, "role_rank", 0, MAX_RANK),
            nonce=_hex(message, "nonce", NONCE_BYTES),
            proof=proof,
        )

    def describe(self) -> str:
        if self.standby:
            return f"a standby FFN server (pid {self.pid})"
        return f"{self.role} rank {self.role_rank} (pid {self.pid})"


@dataclass(frozen=True)
class Answer:
    """The server's answer to a join."""

    accepted: bool
    text: str
    """The server's proof when accepted, else why not."""
    retry: bool = False
    """Refused for now: the world this rank belonged to is still ending."""
    slot: int | None = None
    """A standby's place, when accepted."""

    @classmethod
    def decode(cls, message: Mapping[str, Any]) -> Answer:
        _protocol(message)
        kind = message.get("type")
        if kind == "welcome":
            slot = _int(message, "slot", 0, MAX_RANK) if "slot" in message else None
            return cls(True, _text(message, "proof", 128), slot=slot)
        if kind == "refuse":
            return cls(False, _text(message, "reason"), _field(message, "retry", bool))
        raise RendezvousProtocolError("expected welcome or refuse")


def welcome(proof: str, slot: int | None = None) -> dict[str, Any]:
    """Accepted; a standby learns its standby place (``slot``) here."""
    message: dict[str, Any] = {"protocol": PROTOCOL, "type": "welcome", "proof": proof}
    if slot is not None:
        message["slot"] = slot
    return message


def refuse(reason: str, retry: bool = False) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL,
        "type": "refuse",
        "reason": reason[:4096],
        "retry": retry,
    }


# -- store requests and replies ----------------------------------------------


@dataclass(frozen=True)
class Request:
    """One store operation of a joined client."""

    op: str
    keys: tuple[str, ...]
    value: bytes = b""
    amount: int = 0
    timeout_ms: int = 0

    def encode(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "keys": list(self.keys),
            "value": base64.b64encode(self.value).decode("ascii"),
            "amount": self.amount,
            "timeout_ms": self.timeout_ms,
        }

    @classmethod
    def decode(cls, message: Mapping[str, Any]) -> Request:
        op = _field(message, "op", str)
        if op not in OPS:
            raise RendezvousProtocolError(f"op must be one of {OPS}")
        keys = _field(message, "keys", list)
        if not 0 < len(keys) <= MAX_KEYS:
            raise RendezvousProtocolError(f"a request names 1 to {MAX_KEYS} keys")
        if op in ("set", "get", "add", "delete", "failover") and len(keys) != 1:
            raise RendezvousProtocolError(f"{op} names one key")
        return cls(
            op=op,
            keys=tuple(_key(k) for k in keys),
            value=_b64(_field(message, "value", str)),
            amount=_int(message, "amount", -(1 << 62), 1 << 62),
            timeout_ms=_int(message, "timeout_ms", 0, MAX_TIMEOUT_MS),
        )


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise RendezvousProtocolError("a value is base64") from None


def reply_ok(value: bytes = b"", number: int = 0) -> dict[str, Any]:
    return {
        "ok": True,
        "value": base64.b64encode(value).decode("ascii"),
        "number": number,
    }


def reply_error(reason: str, timed_out: bool = False) -> dict[str, Any]:
    return {"ok": False, "error": reason[:4096], "timed_out": timed_out}


@dataclass(frozen=True)
class Reply:
    ok: bool
    value: bytes = b""
    number: int = 0
    error: str = ""
    timed_out: bool = False

    @classmethod
    def decode(cls, message: Mapping[str, Any]) -> Reply:
        if _field(message, "ok", bool):
            return cls(
                True,
                _b64(_field(message, "value", str)),
                _int(message, "number", -(1 << 63), 1 << 63),
            )
        return cls(
            False,
            error=_text(message, "error"),
            timed_out=_field(message, "timed_out", bool),
        )


def owner_of(key: str) -> int | None:
    """The global rank that alone may write ``key`` (``peer/<g>`` and the like);
    None for shared keys."""
    for prefix in OWNED_PREFIXES:
        if key.startswith(prefix):
            tail = key[len(prefix) :]
            if tail.isdecimal() and len(tail) <= 6:
                return int(tail)
            return -1  # a malformed owned key: nobody may write it
    return None


# -- peer records -----------------------------------------------------------


@dataclass(frozen=True)
class PeerRecord:
    """What a rank publishes at ``peer/<global rank>``: who it is and the
    exchange it expects (``ExchangeSpec.to_dict()``)."""

    role: str
    rank: int
    host: str
    pid: int
    machine: str
    spec: dict[str, Any]

    def encode(self) -> bytes:
        peer = {
            "role": self.role,
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "machine": self.machine,
        }
        return json.dumps({"peer": peer, "spec": self.spec}, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> PeerRecord:
        if len(raw) > MAX_FRAME_BYTES:
            raise RendezvousProtocolError("a peer record is too large")
        message = decode_body(raw)
        peer = _field(message, "peer", dict)
        role = _text(peer, "role", 16)
        if role not in ROLES:
            raise RendezvousProtocolError(f"a peer's role must be one of {ROLES}")
        spec = _field(message, "spec", dict)
        _check_spec(spec)
        return cls(
            role=role,
            rank=_int(peer, "rank", 0, MAX_RANK),
            host=_text(peer, "host", 256),
            pid=_int(peer, "pid", 0, 1 << 31),
            machine=_text(peer, "machine", 512),
            spec=spec,
        )


def _check_spec(spec: Mapping[str, Any]) -> None:
    """The shape of ``ExchangeSpec.to_dict()``, so that ``from_dict`` cannot
    fail on it."""
    _int(spec, "hidden_size", 1, 1 << 24)
    _text(spec, "dtype", 64)
    _text(spec, "router_dtype", 64)
    _int(spec, "stages", 1, 64)
    layers = _field(spec, "layers", list)
    if len(layers) > 4096:
        raise RendezvousProtocolError("too many layers")
    for layer in layers:
        if not isinstance(layer, dict) or set(layer) != {
            "layer",
            "kind",
            "router_logits",
        }:
            raise RendezvousProtocolError("a layer is {layer, kind, router_logits}")
        _int(layer, "layer", 0, 1 << 16)
        _text(layer, "kind", 16)
        _int(layer, "router_logits", 0, 1 << 24)


# -- the shared secret --------------------------------------------------------

SECRET_ENV_PATH = "additional_config.afd.secret_env"
SECRET_FILE_PATH = "additional_config.afd.secret_file"


def load_secret(
    secret_env: str | None,
    secret_file: str | None,
    environ: Mapping[str, str] | None = None,
) -> bytes | None:
    """The deployment's rendezvous secret, from the environment variable or
    the file the config names (never from the config itself); None when it
    names neither. Raises ``AFDConfigError`` naming the field."""
    env = os.environ if environ is None else environ
    if secret_env is not None and secret_file is not None:
        raise AFDConfigError(
            [FieldError(SECRET_FILE_PATH, "set secret_env or secret_file, not both")]
        )
    if secret_env is not None:
        if secret_env not in env:
            raise AFDConfigError(
                [
                    FieldError(
                        SECRET_ENV_PATH,
                        f"the environment variable {secret_env} holding the "
                        "rendezvous secret is not set in this server's environment",
                    )
                ]
            )
        secret, path, where = (
            env[secret_env].encode(),
            SECRET_ENV_PATH,
            f"${secret_env}",
        )
    elif secret_file is not None:
        try:
            with open(secret_file, "rb") as fh:
                secret = fh.read(64 * 1024).strip()
        except OSError as exc:
            raise AFDConfigError(
                [
                    FieldError(
                        SECRET_FILE_PATH,
                        f"cannot read the rendezvous secret {secret_file!r}: "
                        f"{exc.strerror or exc}",
                    )
                ]
            ) from None
        path, where = SECRET_FILE_PATH, secret_file
    else:
        return None
    if len(secret) < MIN_SECRET_BYTES:
        raise AFDConfigError(
            [
                FieldError(
                    path,
                    f"the rendezvous secret in {where} must be at least "
                    f"{MIN_SECRET_BYTES} bytes, got {len(secret)}",
                )
            ]
        )
    return secret


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback (no lookup is done for
    other names: they count as reachable from elsewhere)."""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def exposure_warning(host: str, port: int, has_secret: bool) -> str | None:
    """The warning a rendezvous host logs when it listens where others can
    reach it without a secret; None on loopback or with a secret."""
    if has_secret or is_loopback(host):
        return None
    return (
        f"the AFD rendezvous listens on {host}:{port}, which is not loopback, and "
        "the deployment has no secret: anyone who reaches that address can join "
        "as a rank or read the world's records; set additional_config.afd."
        "secret_env or secret_file on every server"
    )


# -- standbys ------------------------------------------------------------------


def standby_key(slot: int) -> str:
    """Where a standby publishes its ``PeerRecord`` (only it may write)."""
    return f"standby/{slot}"


def standby_left_key(slot: int) -> str:
    """Set by a waiting standby that shuts down in order."""
    return f"standby-left/{slot}"


def promotion_key(slot: int) -> str:
    """Set by the host when it promotes the standby of ``slot``."""
    return f"promote/{slot}"


def failover_key(global_rank: int, silent: bool = False) -> str:
    """The key of a ``failover`` request for a dead FFN rank (``silent``: it
    stopped answering; its connection may still be open)."""
    return f"ffn/{global_rank}" + ("/silent" if silent else "")


def standby_slot_of(key: str) -> int | None:
    """The standby place whose own key ``key`` is, or None."""
    for prefix in ("standby/", "standby-left/"):
        if key.startswith(prefix):
            tail = key[len(prefix) :]
            return int(tail) if tail.isdecimal() and len(tail) <= 6 else -1
    return None


@dataclass(frozen=True)
class Promotion:
    """The host's answer to a failover: which standby now holds the FFN
    rank, and the rank's incarnation (0 for the rank the world formed with)."""

    rank: int
    incarnation: int
    slot: int
    pid: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "rank": self.rank,
                "incarnation": self.incarnation,
                "slot": self.slot,
                "pid": self.pid,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Promotion:
        message = decode_body(raw)
        return cls(
            rank=_int(message, "rank", 0, MAX_RANK),
            incarnation=_int(message, "incarnation", 1, MAX_RANK),
            slot=_int(message, "slot", 0, MAX_RANK),
            pid=_int(message, "pid", 0, 1 << 31),
        )
