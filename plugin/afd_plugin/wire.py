# SPDX-License-Identifier: Apache-2.0
"""The control-plane payload and its byte codec (AFD-I10).

Primitives only, canonical JSON, strict bounded decoding; never pickle.
On the wire a control plane sends the byte length first, then the bytes as a
uint8 tensor; this module owns the bytes and the length bounds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from afd_plugin.step_kind import StepKind

MAX_PAYLOAD_BYTES = 1 << 20
"""Upper bound of one encoded payload; a larger length is refused unread."""

MAX_RANKS = 65536
MAX_TOKENS = 1 << 31


class AFDWireError(ValueError):
    """A control payload that cannot be encoded or decoded."""


@dataclass(frozen=True)
class AFDControlPayload:
    """What the attention side tells the FFN side before each step."""

    stage_key: int
    """Micro-batch stage of this step (0 without micro-batching)."""
    token_counts: tuple[int, ...]
    """Tokens each attention rank sends in this stage, by attention rank."""
    max_count: int
    """Per-rank receive size: max of ``token_counts``, or the padded graph size."""
    is_graph: bool = False
    """The attention side runs this step as a graph (capture or replay)."""
    is_warmup: bool = False
    """A warm-up step: run it, keep nothing."""
    is_profile: bool = False
    """The memory-profiling step before KV-cache sizing."""

    def __post_init__(self) -> None:
        problems = _check(self)
        if problems:
            raise AFDWireError("invalid control payload: " + "; ".join(problems))

    @classmethod
    def of_kind(
        cls,
        kind: StepKind,
        stage_key: int,
        token_counts: tuple[int, ...],
        max_count: int,
    ) -> AFDControlPayload:
        """The payload of one stage of a ``kind`` step (its three wire flags)."""
        is_graph, is_warmup, is_profile = StepKind(kind).flags
        return cls(stage_key, token_counts, max_count, is_graph, is_warmup, is_profile)

    @property
    def kind(self) -> StepKind:
        """The step kind the three flags name (checked at construction)."""
        return StepKind.from_flags(self.is_graph, self.is_warmup, self.is_profile)

    @property
    def total_tokens(self) -> int:
        return sum(self.token_counts)


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(AFDControlPayload))
_BOOL_FIELDS = ("is_graph", "is_warmup", "is_profile")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(p: AFDControlPayload) -> list[str]:
    problems: list[str] = []
    if not _is_int(p.stage_key) or not 0 <= p.stage_key < 1 << 16:
        problems.append(
            f"stage_key must be an integer in [0, 65535], got {p.stage_key!r}"
        )
    counts = p.token_counts
    if not isinstance(counts, tuple) or not all(_is_int(c) for c in counts):
        problems.append(f"token_counts must be a tuple of integers, got {counts!r}")
        counts = ()
    elif not 1 <= len(counts) <= MAX_RANKS:
        problems.append(
            f"token_counts must list 1..{MAX_RANKS} ranks, got {len(counts)}"
        )
    elif any(not 0 <= c < MAX_TOKENS for c in counts):
        problems.append(f"token_counts must be in [0, {MAX_TOKENS}), got {counts!r}")
    if not _is_int(p.max_count) or not 0 <= p.max_count < MAX_TOKENS:
        problems.append(
            f"max_count must be an integer in [0, {MAX_TOKENS}), got {p.max_count!r}"
        )
    elif counts and p.max_count < max(counts):
        problems.append(
            f"max_count {p.max_count} is below the largest token count {max(counts)}"
        )
    flags = [getattr(p, name) for name in _BOOL_FIELDS]
    for name, value in zip(_BOOL_FIELDS, flags, strict=True):
        if not isinstance(value, bool):
            problems.append(f"{name} must be a bool, got {value!r}")
    if all(isinstance(f, bool) for f in flags):
        try:
            StepKind.from_flags(*flags)
        except ValueError as exc:
            problems.append(str(exc))
    return problems


def encode_payload(payload: AFDControlPayload) -> bytes:
    """Canonical JSON bytes: sorted keys, no spaces, ASCII."""
    obj = {name: getattr(payload, name) for name in FIELDS}
    obj["token_counts"] = list(payload.token_counts)
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("ascii")
    check_length(len(data))
    return data


def check_length(length: int) -> int:
    """Validate a received length header before reading that many bytes."""
    if not _is_int(length) or not 0 < length <= MAX_PAYLOAD_BYTES:
        raise AFDWireError(
            f"control payload length must be in [1, {MAX_PAYLOAD_BYTES}], "
            f"got {length!r}"
        )
    return length


def _reject_constant(name: str) -> Any:
    raise AFDWireError(f"control payload contains non-finite number {name}")


def decode_payload(data: bytes | bytearray | memoryview) -> AFDControlPayload:
    """Parse bytes from the wire; any defect raises ``AFDWireError``."""
    raw = bytes(data)
    check_length(len(raw))
    try:
        obj = json.loads(raw.decode("ascii"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AFDWireError(f"control payload is not ASCII JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise AFDWireError(
            f"control payload must be a JSON object, got {type(obj).__name__}"
        )
    unknown = sorted(set(obj) - set(FIELDS))
    missing = sorted(set(FIELDS) - set(obj))
    if unknown or missing:
        raise AFDWireError(
            f"control payload fields differ: unknown {unknown}, missing {missing}; "
            f"expected exactly {list(FIELDS)}"
        )
    counts = obj["token_counts"]
    if not isinstance(counts, list):
        raise AFDWireError(f"token_counts must be a list, got {type(counts).__name__}")
    obj["token_counts"] = tuple(counts)
    return AFDControlPayload(**obj)
