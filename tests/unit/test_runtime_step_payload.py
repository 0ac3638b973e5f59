"""What the attention side announces per step: block token counts for DP and
TP layouts, step kinds, and the bytes that go on the wire.
"""

from __future__ import annotations

import json

import pytest

from afd_plugin.runtime.step_payload import block_token_counts, step_payload
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
    ("kind", "warmup", "profile"),
    [("eager", False, False), ("warmup", True, False), ("profile", False, True)],
)
def test_step_kinds_set_the_payload_flags(
    kind: str, warmup: bool, profile: bool
) -> None:
    payload = step_payload((3, 0), kind)
    assert (payload.is_warmup, payload.is_profile, payload.is_graph) == (
        warmup,
        profile,
        False,
    )
    assert payload.max_count == 3 and payload.total_tokens == 3


def test_unknown_step_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="step kind"):
        step_payload((1,), "capture")


def test_wire_bytes_are_canonical_json_of_primitives() -> None:
    payload = step_payload((4, 2), "warmup")
    data = encode_payload(payload)
    assert json.loads(data) == {
        "stage_key": 0,
        "token_counts": [4, 2],
        "max_count": 4,
        "is_graph": False,
        "is_warmup": True,
        "is_profile": False,
    }
    assert decode_payload(data) == payload
    with pytest.raises(AFDWireError):
        decode_payload(data.replace(b'"max_count":4', b'"max_count":1'))
