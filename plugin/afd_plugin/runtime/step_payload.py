"""What the attention side announces for one step: the token counts of its
block and the step kind, as an ``AFDControlPayload`` (AFD-I10).

Pure: no torch, no vLLM; the attention runner of every platform uses it.
"""

from __future__ import annotations

from afd_plugin.wire import AFDControlPayload

STEP_KINDS = ("eager", "warmup", "profile")


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
    counts: tuple[int, ...], kind: str, stage: int = 0
) -> AFDControlPayload:
    if kind not in STEP_KINDS:
        raise ValueError(f"step kind must be one of {STEP_KINDS}, got {kind!r}")
    return AFDControlPayload(
        stage_key=stage,
        token_counts=counts,
        max_count=max(counts),
        is_graph=False,
        is_warmup=kind == "warmup",
        is_profile=kind == "profile",
    )
