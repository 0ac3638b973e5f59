# SPDX-License-Identifier: Apache-2.0
"""What the attention side announces per step: block token counts for DP and
TP layouts, step kinds (capture and replay included), per-stage payloads and
the bytes that go on the wire.
"""

from __future__ import annotations

import json

import pytest

from afd_plugin.graph_policy import make_ffn_graph_key
from afd_plugin.step_kind import StepKind, resolve_step_kind
from afd_plugin.step_protocol import (
    block_token_counts,
    dual_ubatch_tokens,
    live_stages,
    stage_payloads,
    stage_rows,
    step_payload,
)
from afd_plugin.topology import attention_block, ffn_rank_for_attention
from afd_plugin.wire import AFDWireError, decode_payload, encode_payload


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
