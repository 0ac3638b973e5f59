# SPDX-License-Identifier: Apache-2.0
"""Where a promoted standby FFN server picks up a step: the resume record
an attention rank sends it first, and which (layer, stage) exchanges of the
step each attention rank still needs.

Pure (no torch). After a failover an attention rank resends, in the order it
first sent them, the current step's control payloads and every layer input
whose output it has not received. Per micro-batch stage that is at most one
input (a stage sends a layer, then waits for its output), so a stage resumes
at that layer; a stage with nothing pending resumes after the last layer it
got back (or at the first layer when it got none). The standby serves each
stage from its resume layer on, for the ranks that need it, in the order the
exchange schedule gives; the wire then carries exactly what it expects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from afd_plugin.wire import AFDWireError

DONE = 1 << 30
"""The resume layer of a stage that got every layer's output back."""
MAX_RECORD_BYTES = 4096


@dataclass(frozen=True)
class ResumeRecord:
    """What an attention rank tells a promoted standby before it resends."""

    step: int
    """The attention rank's step counter (for messages)."""
    starts: tuple[int, ...]
    """Per micro-batch stage, the first layer it sends the standby (``DONE``:
    none, the stage has every output of this step)."""

    def encode(self) -> bytes:
        return json.dumps(
            {"resume": 1, "step": self.step, "starts": list(self.starts)},
            sort_keys=True,
            separators=(",", ":"),
        ).encode("ascii")

    @classmethod
    def decode(cls, raw: bytes) -> ResumeRecord:
        if len(raw) > MAX_RECORD_BYTES:
            raise AFDWireError(f"a resume record of {len(raw)} bytes is too long")
        try:
            message = json.loads(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise AFDWireError(f"not a resume record: {exc}") from None
        if not isinstance(message, dict) or message.get("resume") != 1:
            raise AFDWireError(f"not a resume record: {raw[:80]!r}")
        step, starts = message.get("step"), message.get("starts")
        valid = (
            isinstance(step, int)
            and not isinstance(step, bool)
            and step >= 0
            and isinstance(starts, list)
            and 1 <= len(starts) <= 64
            and all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= DONE
                for s in starts
            )
        )
        if not valid:
            raise AFDWireError(f"malformed resume record: {message!r}")
        return cls(step, tuple(starts))


def resume_starts(
    layers: Sequence[int],
    stages: int,
    pending: Iterable[tuple[int, int]],
    answered: Mapping[int, int],
) -> tuple[int, ...]:
    """Per stage, the layer a resumed step starts at: the pending input's
    layer, else the layer after the last answered one (``DONE`` past the
    end), else the first layer. ``pending``: unanswered (layer, stage) sends;
    ``answered``: stage -> last layer whose output came back."""
    if not layers:
        return tuple(DONE for _ in range(stages))
    waiting: dict[int, int] = {}
    for layer, stage in pending:
        waiting[stage] = min(layer, waiting.get(stage, layer))
    order = {layer: i for i, layer in enumerate(layers)}
    starts = []
    for stage in range(stages):
        if stage in waiting:
            starts.append(waiting[stage])
        elif stage in answered:
            after = order[answered[stage]] + 1
            starts.append(layers[after] if after < len(layers) else DONE)
        else:
            starts.append(layers[0])
    return tuple(starts)
