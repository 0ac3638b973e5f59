# SPDX-License-Identifier: Apache-2.0
"""The micro-batch evidence log contract: one line per step that really ran two.

The runtime formats the record, the harness parses it; pure (no torch, no vLLM).

A record is one log line holding, anywhere after an arbitrary prefix::

    AFD_EVIDENCE dual_ubatch v=1 role=attention rank=0 step=17 ubatches=2 tokens=5,4

Fields come in this order, separated by single spaces, and the record ends the
line (trailing whitespace aside). ``tokens`` lists the token count of each
micro-batch; there are ``ubatches`` (>= 2) of them and each is >= 1. Anything
else (a truncated or interleaved line, an unknown version) is not a record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

TAG = "AFD_EVIDENCE"
KIND_DUAL_UBATCH = "dual_ubatch"
VERSION = 1
ROLES: tuple[str, ...] = ("attention", "ffn")

Role = Literal["attention", "ffn"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RECORD = re.compile(
    r"(?<![A-Za-z0-9_])"
    + TAG
    + " "
    + KIND_DUAL_UBATCH
    + r" v=(?P<v>\d+) role=(?P<role>[a-z]+) rank=(?P<rank>\d+) step=(?P<step>\d+)"
    r" ubatches=(?P<ubatches>\d+) tokens=(?P<tokens>\d+(?:,\d+)*)\s*$"
)


@dataclass(frozen=True)
class DualUbatchRecord:
    """One step that ran with two (or more) non-empty micro-batches."""

    role: Role
    rank: int
    step: int
    tokens: tuple[int, ...]

    @property
    def ubatches(self) -> int:
        return len(self.tokens)

    @property
    def key(self) -> str:
        """``role:rank``, the key the harness counts records by."""
        return f"{self.role}:{self.rank}"


def format_dual_ubatch(role: str, rank: int, step: int, tokens: Sequence[int]) -> str:
    """The record for one step; raises ValueError when it would not parse back."""
    errors = []
    if role not in ROLES:
        errors.append(f"role must be one of {ROLES}, got {role!r}")
    for name, value in (("rank", rank), ("step", step)):
        if not _is_int(value) or value < 0:
            errors.append(f"{name} must be an int >= 0, got {value!r}")
    counts = list(tokens)
    if len(counts) < 2:
        errors.append(f"tokens must list >= 2 micro-batches, got {counts!r}")
    if not all(_is_int(c) and c >= 1 for c in counts):
        errors.append(f"tokens must be ints >= 1, got {counts!r}")
    if errors:
        raise ValueError("evidence record: " + "; ".join(errors))
    return (
        f"{TAG} {KIND_DUAL_UBATCH} v={VERSION} role={role} rank={rank} step={step}"
        f" ubatches={len(counts)} tokens={','.join(str(c) for c in counts)}"
    )


def parse_line(line: str) -> DualUbatchRecord | None:
    """The record a log line carries, or None when it carries none."""
    if TAG not in line:
        return None
    match = _RECORD.search(_ANSI.sub("", line).rstrip("\r\n"))
    if match is None or int(match["v"]) != VERSION or match["role"] not in ROLES:
        return None
    tokens = tuple(int(t) for t in match["tokens"].split(","))
    if len(tokens) != int(match["ubatches"]) or len(tokens) < 2 or min(tokens) < 1:
        return None
    role: Role = "attention" if match["role"] == "attention" else "ffn"
    return DualUbatchRecord(role, int(match["rank"]), int(match["step"]), tokens)


def parse_lines(lines: Iterable[str]) -> Iterator[DualUbatchRecord]:
    """Every record in ``lines``, in order."""
    for line in lines:
        record = parse_line(line)
        if record is not None:
            yield record


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
