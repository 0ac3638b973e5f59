# SPDX-License-Identifier: Apache-2.0
"""What the attention side announces per step: block token counts for DP and
TP layouts, step kinds (capture and replay included), per-stage payloads and
the bytes that go on the wire.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from afd_plugin.graph_policy import make_ffn_graph_key
from afd_plugin.step_kind import StepKind, resolve_step_kind
from afd_plugin.step_protocol import (
    block_token_counts,
    dual_ubatch_tokens,
    live_stages,
    merge_block_payloads,
    request_boundary_split,
    stage_payloads,
    stage_rows,
    step_payload,
)
from afd_plugin.topology import attention_block, ffn_rank_for_attention
from afd_plugin.wire import (
    AFDControlPayload,
    AFDWireError,
    decode_payload,
    encode_payload,
)


def test_without_dp_every_rank_of_the_block_sends_the_local_count() -> None:
    # 2 attention ranks that are the two TP ranks of one DP rank, one FFN rank.
    assert block_token_counts(7, None, 2, range(0, 2)) == (7, 7)
    assert block_token_counts(7, None, 1, range(0, 1)) == (7,)


def test_dp_counts_are_read_per_rank_of_the_block() -> None:
    # 4 attention ranks = DP2 x TP2, two FFN ranks: blocks [0, 1] and [2, 3].
    dp_counts = [5, 9]
    blocks = [attention_block(f, 4, 2) for f in range(2)]
    assert [block_token_counts(0, dp_counts, 2, b) for b in blocks] == [
        (5, 5),
        (9, 9),
    ]
    # 2A1F with DP2: one block holding both DP ranks.
    assert block_token_counts(5, dp_counts, 1, attention_block(0, 2, 1)) == (5, 9)
    assert ffn_rank_for_attention(1, 2, 1) == 0


@pytest.mark.parametrize(
    ("kind", "graph_size", "flags"),
    [
        ("eager", None, (False, False, False)),
        ("warmup", None, (False, True, False)),
        ("profile", None, (False, False, True)),
        ("capture", 8, (True, True, False)),
        ("replay", 8, (True, False, False)),
    ],
)
def test_step_kinds_set_the_payload_flags(
    kind: str, graph_size: int | None, flags: tuple[bool, bool, bool]
) -> None:
    payload = step_payload((3, 0), kind, graph_size=graph_size)
    assert payload.kind is StepKind(kind)
    assert (payload.is_graph, payload.is_warmup, payload.is_profile) == flags
    assert payload.max_count == (graph_size or 3) and payload.total_tokens == 3


def test_graph_kinds_need_the_padded_size_and_others_refuse_one() -> None:
    with pytest.raises(ValueError, match="padded graph size"):
        step_payload((4,), "replay")
    with pytest.raises(ValueError, match="no graph size"):
        step_payload((4,), "eager", graph_size=4)
    with pytest.raises(ValueError, match="step kind"):
        step_payload((1,), "decode")
    # The graph key is what the FFN side caches by: stage, ranks, padded size.
    assert make_ffn_graph_key(step_payload((3, 4), "replay", 1, 8)) == (1, 2, 8)


@pytest.mark.parametrize(
    ("marked", "graph", "capturing", "kind"),
    [
        ("eager", False, False, "eager"),
        ("eager", True, False, "replay"),
        ("warmup", True, True, "capture"),
        ("warmup", False, True, "warmup"),
        ("profile", True, True, "profile"),
        ("eager", True, True, "capture"),
    ],
)
def test_step_kind_resolution(
    marked: str, graph: bool, capturing: bool, kind: str
) -> None:
    assert resolve_step_kind(marked, graph, capturing) is StepKind(kind)


def test_unsplit_step_fills_the_second_stage_with_zero_tokens() -> None:
    payloads = stage_payloads([(5, 3)], "eager", stages=2)
    assert [p.stage_key for p in payloads] == [0, 1]
    assert payloads[1].token_counts == (0, 0) and payloads[1].max_count == 0
    assert live_stages(payloads) == (0,)
    assert dual_ubatch_tokens(payloads) is None
    graph = stage_payloads([(8, 8)], "replay", stages=2, graph_sizes=[8])
    assert graph[1].is_graph and graph[1].max_count == 0 and live_stages(graph) == (0,)


def test_graph_stage_moves_the_padded_size_from_every_rank() -> None:
    assert stage_rows(step_payload((3, 5), "replay", graph_size=8)) == (8, 8)
    assert stage_rows(step_payload((3, 5), "eager")) == (3, 5)


def test_two_non_empty_micro_batches_are_evidence_captures_are_not() -> None:
    split = stage_payloads([(4, 4), (3, 3)], "eager", stages=2)
    assert dual_ubatch_tokens(split) == (8, 6)
    replay = stage_payloads([(4,), (4,)], "replay", 2, graph_sizes=[4, 4])
    assert dual_ubatch_tokens(replay) == (4, 4)
    capture = stage_payloads([(4,), (4,)], "capture", 2, graph_sizes=[4, 4])
    assert dual_ubatch_tokens(capture) is None
    with pytest.raises(ValueError, match="1..2 micro-batch stages"):
        stage_payloads([(1,), (1,), (1,)], "eager", stages=2)


def test_wire_bytes_are_canonical_json_of_primitives() -> None:
    payload = step_payload((4, 2), "capture", graph_size=4)
    data = encode_payload(payload)
    assert json.loads(data) == {
        "stage_key": 0,
        "token_counts": [4, 2],
        "max_count": 4,
        "is_graph": True,
        "is_warmup": True,
        "is_profile": False,
    }
    assert decode_payload(data) == payload
    with pytest.raises(AFDWireError):
        decode_payload(data.replace(b'"max_count":4', b'"max_count":1'))


# -- the split rule and the block's stages ------------------------------------


@pytest.mark.parametrize(
    ("tokens", "stages", "split"),
    [
        ([1, 1, 1, 1], 2, (2, 2)),  # decodes: half the requests each
        ([1, 1, 1], 2, (1, 2)),  # odd: vLLM's cut at total // 2
        ([1], 2, None),  # one request is never split
        ([], 2, None),
        ([3, 3], 2, (3, 3)),  # two verify rows each (n-gram): a boundary
        ([3, 3, 3], 2, None),  # the cut at 4 falls inside the second request
        ([5, 1, 1, 1], 2, None),  # a prefill across the cut
        ([1, 1, 6], 2, None),
        ([4, 1, 1, 1, 1], 2, (4, 4)),  # a prefill ending at the cut: whole
        ([1, 1, 1, 1], 1, None),
    ],
)
def test_request_boundary_split(
    tokens: list[int], stages: int, split: tuple[int, ...] | None
) -> None:
    assert request_boundary_split(tokens, stages) == split


def test_request_boundary_split_never_cuts_a_request() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        tokens = [rng.choice((1, 1, 1, 2, 3, 17)) for _ in range(rng.randint(0, 9))]
        sizes = request_boundary_split(tokens, 2)
        if sizes is None:
            continue
        edges = set(itertools.accumulate(tokens))
        assert sizes[0] in edges and sum(sizes) == sum(tokens) and min(sizes) > 0


def own(counts: tuple[int, ...], index: int, stage: int = 0) -> AFDControlPayload:
    """Block rank ``index``'s payload: its own count, zeros for the others."""
    mine = tuple(c if i == index else 0 for i, c in enumerate(counts))
    return step_payload(mine, StepKind.EAGER, stage)


def test_a_block_stage_takes_each_ranks_own_rows() -> None:
    merged = merge_block_payloads([own((3, 0, 5), i, 1) for i in range(3)])
    assert merged.token_counts == (3, 0, 5) and merged.max_count == 5
    assert merged.stage_key == 1 and merged.kind is StepKind.EAGER
    # Ranks that know every count (vLLM's DP metadata) agree with it.
    full = [step_payload((2, 4), StepKind.EAGER) for _ in range(2)]
    assert merge_block_payloads(full) == full[0]


def test_a_block_disagreeing_on_stage_or_kind_is_a_wire_error() -> None:
    with pytest.raises(AFDWireError, match="block rank 1 sent"):
        merge_block_payloads([own((1, 1), 0, 0), own((1, 1), 1, 1)])
    warm = step_payload((0, 1), StepKind.WARMUP)
    with pytest.raises(AFDWireError, match="disagree"):
        merge_block_payloads([own((1, 1), 0), warm])
    with pytest.raises(AFDWireError, match="3 control payloads for a block of 2"):
        merge_block_payloads([own((1, 1), 0)] * 3)
