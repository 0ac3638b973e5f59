# SPDX-License-Identifier: Apache-2.0
"""The step protocol's one vocabulary: how a step runs (``StepKind``).

Pure. The attention side marks and resolves it, the wire codec carries it as
three flags, the FFN daemon serves by it.
"""

from __future__ import annotations

import enum


class StepKind(str, enum.Enum):
    """How one step runs, on both roles."""

    EAGER = "eager"
    """A plain step: move data, run the blocks."""
    WARMUP = "warmup"
    """A warm-up step: run it, keep nothing."""
    PROFILE = "profile"
    """The memory-profiling step before KV-cache sizing; never a graph."""
    CAPTURE = "capture"
    """The attention side records a graph: the FFN side captures the graphs of
    the step's keys; no data moves."""
    REPLAY = "replay"
    """The attention side replays a graph: move data, replay the FFN graphs."""

    @property
    def is_graph(self) -> bool:
        """Whether the attention side runs the step as a graph."""
        return self in (StepKind.CAPTURE, StepKind.REPLAY)

    @property
    def is_warmup(self) -> bool:
        """Whether nothing the step computes is kept (a capture is one too)."""
        return self in (StepKind.WARMUP, StepKind.CAPTURE)

    @property
    def is_profile(self) -> bool:
        return self is StepKind.PROFILE

    @property
    def flags(self) -> tuple[bool, bool, bool]:
        """``(is_graph, is_warmup, is_profile)``: the kind on the wire."""
        return (self.is_graph, self.is_warmup, self.is_profile)

    @classmethod
    def from_flags(cls, is_graph: bool, is_warmup: bool, is_profile: bool) -> StepKind:
        """The kind three wire flags name; ``ValueError`` when they name none."""
        kind = _BY_FLAGS.get((is_graph, is_warmup, is_profile))
        if kind is None:
            raise ValueError(
                f"is_graph={is_graph}, is_warmup={is_warmup}, is_profile="
                f"{is_profile} name no step kind; valid: "
                + ", ".join(f"{k.value} {k.flags}" for k in cls)
            )
        return kind


_BY_FLAGS: dict[tuple[bool, bool, bool], StepKind] = {k.flags: k for k in StepKind}

MARKED_KINDS: frozenset[StepKind] = frozenset(
    {StepKind.EAGER, StepKind.WARMUP, StepKind.PROFILE}
)
"""Kinds a runner marks around vLLM's calls; graph kinds are resolved."""


def resolve_step_kind(
    marked: StepKind | str, runs_graph: bool, capturing: bool
) -> StepKind:
    """The kind of a step from what the runner marked around it and how vLLM
    runs it: a profile step never uses a graph; a graph step is a capture
    while vLLM captures, else a replay."""
    if marked not in MARKED_KINDS:
        raise ValueError(
            f"marked kind must be one of {sorted(k.value for k in MARKED_KINDS)}, "
            f"got {marked!r}"
        )
    marked = StepKind(marked)
    if marked is StepKind.PROFILE or not runs_graph:
        return marked
    return StepKind.CAPTURE if capturing else StepKind.REPLAY
