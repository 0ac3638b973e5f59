# SPDX-License-Identifier: Apache-2.0
"""The step protocol: the payloads of one step (one per micro-batch stage, each
with the step kind) and the rows each stage moves (AFD-I10).

Pure: the attention side builds payloads here, connectors size stages and the
FFN daemon picks stages from them.
"""

from __future__ import annotations

from collections.abc import Sequence

from afd_plugin.step_kind import StepKind
from afd_plugin.wire import AFDControlPayload, AFDWireError


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


def request_boundary_split(
    tokens_per_request: Sequence[int], stages: int
) -> tuple[int, ...] | None:
    """Tokens of each micro-batch when a step of requests with these token
    counts splits into ``stages`` at vLLM's even token split points
    (``total // stages`` apart, as its ubatch slicing cuts), or None when a
    cut would fall inside a request (prefill rows, or several draft tokens
    per request), or would leave a micro-batch empty. The one rule both the
    CPU micro-batches and every attention rank of a block follow: a request's
    rows never span two micro-batches."""
    total = sum(tokens_per_request)
    if stages < 2 or len(tokens_per_request) < stages or total < stages:
        return None
    step = total // stages
    boundaries = set()
    start = 0
    for count in tokens_per_request:
        start += count
        boundaries.add(start)
    cuts = [step * i for i in range(1, stages)]
    if any(cut not in boundaries for cut in cuts):
        return None
    edges = [0, *cuts, total]
    sizes = tuple(edges[i + 1] - edges[i] for i in range(stages))
    return sizes if all(sizes) else None


def merge_block_payloads(
    payloads: Sequence[AFDControlPayload],
) -> AFDControlPayload:
    """One stage of a block, assembled from the payloads its attention ranks
    sent, in block order: each rank is authoritative for its own rows (its
    entry of ``token_counts``), because with micro-batches each rank splits its
    own step and knows no other rank's split. The ranks must agree on the
    stage and the step kind, and in a graph step on the padded size."""
    first = payloads[0]
    width = len(first.token_counts)
    if len(payloads) != width:
        raise AFDWireError(
            f"{len(payloads)} control payloads for a block of {width} attention ranks"
        )
    for index, other in enumerate(payloads[1:], start=1):
        if (other.stage_key, other.kind) != (first.stage_key, first.kind):
            raise AFDWireError(
                f"attention ranks of one block disagree: block rank 0 sent "
                f"{first}, block rank {index} sent {other}"
            )
        if first.is_graph and other.max_count != first.max_count:
            raise AFDWireError(
                f"attention ranks of one block disagree on the padded graph size: "
                f"{first.max_count} (block rank 0), {other.max_count} "
                f"(block rank {index})"
            )
        if len(other.token_counts) != width:
            raise AFDWireError(
                f"block rank {index} lists {len(other.token_counts)} token counts, "
                f"block rank 0 lists {width}"
            )
    counts = tuple(p.token_counts[i] for i, p in enumerate(payloads))
    max_count = first.max_count if first.is_graph else max(counts)
    return AFDControlPayload.of_kind(first.kind, first.stage_key, counts, max_count)
