"""What the attention side announces for one step: the token counts of each
micro-batch stage and the step kind, as ``AFDControlPayload``s (AFD-I10).

Pure: no torch, no vLLM; the attention runner of every platform uses it.
"""

from __future__ import annotations

from collections.abc import Sequence

from afd_plugin.wire import AFDControlPayload

STEP_KINDS = ("eager", "warmup", "profile", "capture", "replay")
"""``capture``: the attention side records a graph (``is_graph`` and
``is_warmup``: nothing it computes is kept); ``replay``: it replays one
(``is_graph`` only). Both carry the padded graph size as ``max_count``."""

MARKED_KINDS = ("eager", "warmup", "profile")
"""Kinds a runner marks around vLLM's calls; graph kinds are derived."""

GRAPH_KINDS = ("capture", "replay")


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
    kind: str,
    stage: int = 0,
    graph_size: int | None = None,
) -> AFDControlPayload:
    """The payload of one stage. Graph kinds need ``graph_size``, the padded
    size every rank of the block sends (the FFN graph's receive size)."""
    if kind not in STEP_KINDS:
        raise ValueError(f"step kind must be one of {STEP_KINDS}, got {kind!r}")
    is_graph = kind in GRAPH_KINDS
    if is_graph and graph_size is None:
        raise ValueError(f"a {kind} step needs the padded graph size")
    if not is_graph and graph_size is not None:
        raise ValueError(f"a {kind} step has no graph size, got {graph_size}")
    return AFDControlPayload(
        stage_key=stage,
        token_counts=counts,
        max_count=graph_size if graph_size is not None else max(counts),
        is_graph=is_graph,
        is_warmup=kind in ("warmup", "capture"),
        is_profile=kind == "profile",
    )


def resolve_step_kind(marked: str, runs_graph: bool, capturing: bool) -> str:
    """The kind of a step from what the runner marked around it (``eager``,
    ``warmup`` or ``profile``) and how vLLM runs it: a profile step never
    uses a graph; a graph step is a capture while vLLM captures, else a
    replay."""
    if marked not in MARKED_KINDS:
        raise ValueError(f"marked kind must be one of {MARKED_KINDS}, got {marked!r}")
    if marked == "profile" or not runs_graph:
        return marked
    return "capture" if capturing else "replay"


def stage_payloads(
    stage_counts: Sequence[tuple[int, ...]],
    kind: str,
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
    if len(payloads) < 2 or (payloads[0].is_graph and payloads[0].is_warmup):
        return None
    totals = tuple(p.total_tokens for p in payloads)
    if sum(1 for t in totals if t > 0) < 2:
        return None
    return totals
