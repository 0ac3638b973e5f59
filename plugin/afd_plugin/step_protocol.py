# SPDX-License-Identifier: Apache-2.0
"""The step protocol: the payloads of one step (one per micro-batch stage, each
with the step kind) and the rows each stage moves (AFD-I10).

Pure: the attention side builds payloads here, connectors size stages and the
FFN daemon picks stages from them.
"""

from __future__ import annotations

from collections.abc import Sequence

from afd_plugin.step_kind import StepKind
from afd_plugin.wire import AFDControlPayload


def block_token_counts(
    num_tokens: int,
    dp_counts: list[int] | None,
    tp_size: int,
    block: range,
) -> tuple[int, ...]:
    """Tokens each attention rank of ``block`` sends this step. Attention rank
    ``r`` is DP rank ``r // tp_size``; TP ranks of one DP rank send the same
    tokens; without DP metadata every rank of the block is this DP rank."""
    if dp_counts is None:
        return tuple(num_tokens for _ in block)
    return tuple(int(dp_counts[r // tp_size]) for r in block)


def step_payload(
    counts: tuple[int, ...],
    kind: StepKind | str,
    stage: int = 0,
    graph_size: int | None = None,
) -> AFDControlPayload:
    """The payload of one stage. Graph kinds (capture, replay) need
    ``graph_size``, the padded size every rank of the block sends (the FFN
    graph's receive size, carried as ``max_count``)."""
    kind = _kind(kind)
    if kind.is_graph and graph_size is None:
        raise ValueError(f"a {kind.value} step needs the padded graph size")
    if not kind.is_graph and graph_size is not None:
        raise ValueError(f"a {kind.value} step has no graph size, got {graph_size}")
    max_count = graph_size if graph_size is not None else max(counts)
    return AFDControlPayload.of_kind(kind, stage, counts, max_count)


def _kind(kind: StepKind | str) -> StepKind:
    try:
        return StepKind(kind)
    except ValueError:
        allowed = ", ".join(k.value for k in StepKind)
        raise ValueError(f"step kind must be one of {allowed}, got {kind!r}") from None


def stage_payloads(
    stage_counts: Sequence[tuple[int, ...]],
    kind: StepKind | str,
    stages: int,
    graph_sizes: Sequence[int] | None = None,
) -> tuple[AFDControlPayload, ...]:
    """One payload per stage of a step, ``stages`` of them (the deployment's
    micro-batch count, agreed at rendezvous). A step vLLM did not split fills
    the missing stages with zero tokens, so the FFN side always reads the
    same number of payloads per step."""
    if not 1 <= len(stage_counts) <= stages:
        raise ValueError(
            f"a step has 1..{stages} micro-batch stages, got {len(stage_counts)}"
        )
    if graph_sizes is not None and len(graph_sizes) != len(stage_counts):
        raise ValueError("one graph size per stage")
    width = len(stage_counts[0])
    out = []
    for stage in range(stages):
        if stage < len(stage_counts):
            counts = tuple(stage_counts[stage])
            size = graph_sizes[stage] if graph_sizes is not None else None
        else:
            counts = (0,) * width
            size = 0 if graph_sizes is not None else None
        out.append(step_payload(counts, kind, stage, size))
    return tuple(out)


def stage_rows(payload: AFDControlPayload) -> tuple[int, ...]:
    """Rows each attention rank of the block moves in this stage: the padded
    graph size in a graph step (static shapes), else its token count."""
    if payload.is_graph:
        return (payload.max_count,) * len(payload.token_counts)
    return payload.token_counts


def live_stages(payloads: Sequence[AFDControlPayload]) -> tuple[int, ...]:
    """Stages of a step that move any data (a skipped micro-batch moves none)."""
    return tuple(p.stage_key for p in payloads if sum(stage_rows(p)) > 0)


def dual_ubatch_tokens(payloads: Sequence[AFDControlPayload]) -> tuple[int, ...] | None:
    """Tokens per micro-batch when a step really ran two or more non-empty
    micro-batches (what the evidence record reports), else None. A capture
    step moves no data and is never evidence."""
    if len(payloads) < 2 or payloads[0].kind is StepKind.CAPTURE:
        return None
    totals = tuple(p.total_tokens for p in payloads)
    if sum(1 for t in totals if t > 0) < 2:
        return None
    return totals
