# SPDX-License-Identifier: Apache-2.0
"""Topology: balanced contiguous blocks, FFN-first world, metadata groups.

Exhaustive over every (A, F) pair up to 24 ranks.
"""

from __future__ import annotations

import pytest

from afd_plugin.topology import (
    WorldLayout,
    attention_block,
    ffn_rank_for_attention,
    role_rank,
    strided_ffn_rank,
    strided_group,
)

PAIRS = [(a, f) for a in range(1, 25) for f in range(1, a + 1)]


@pytest.mark.parametrize(("num_a", "num_f"), PAIRS)
def test_blocks_partition_attention_ranks_in_balanced_contiguous_blocks(num_a, num_f):
    blocks = [attention_block(f, num_a, num_f) for f in range(num_f)]
    flat = [a for b in blocks for a in b]
    assert flat == list(range(num_a))  # contiguous, ordered, complete
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert sizes == sorted(sizes, reverse=True)  # the remainder goes first
    for f, block in enumerate(blocks):
        for a in block:
            assert ffn_rank_for_attention(a, num_a, num_f) == f


@pytest.mark.parametrize(("num_a", "num_f"), PAIRS)
def test_strided_groups_partition_attention_ranks_by_slot(num_a, num_f):
    """CAM P2P: attention a sits in slot a // F of FFN a % F; with A % F != 0
    the FFN ranks from A % F on serve one slot fewer."""
    groups = [strided_group(f, num_a, num_f) for f in range(num_f)]
    assert sorted(a for g in groups for a in g) == list(range(num_a))
    for f, group in enumerate(groups):
        for slot, a in enumerate(group):
            assert strided_ffn_rank(a, num_a, num_f) == f
            assert a == f + slot * num_f
    full = -(-num_a // num_f)
    expected = [
        full if num_a % num_f == 0 or f < num_a % num_f else full - 1
        for f in range(num_f)
    ]
    assert [len(g) for g in groups] == expected


def test_strided_mapping_refuses_ranks_outside_the_world():
    with pytest.raises(ValueError, match="ffn_rank 2 outside"):
        strided_group(2, 4, 2)
    with pytest.raises(ValueError, match="attention_rank 4 outside"):
        strided_ffn_rank(4, 4, 2)
    with pytest.raises(ValueError, match="num_attention_ranks >= num_ffn_ranks"):
        strided_group(0, 1, 2)


@pytest.mark.parametrize(("num_a", "num_f"), PAIRS)
def test_world_layout_puts_ffn_first(num_a, num_f):
    layout = WorldLayout(num_a, num_f)
    ranks = [layout.global_rank("ffn", f) for f in range(num_f)]
    ranks += [layout.global_rank("attention", a) for a in range(num_a)]
    assert ranks == list(range(num_a + num_f))
    for g in range(layout.world_size):
        role, rank = layout.role_of(g)
        assert layout.global_rank(role, rank) == g
    for f in range(num_f):
        block = attention_block(f, num_a, num_f)
        assert all(layout.peer_of("attention", a) == f for a in block)


def test_example_five_attention_two_ffn() -> None:
    assert [ffn_rank_for_attention(a, 5, 2) for a in range(5)] == [0, 0, 0, 1, 1]
    assert list(attention_block(1, 5, 2)) == [3, 4]
    assert WorldLayout(5, 2).peer_of("attention", 4) == 1


@pytest.mark.parametrize(("num_a", "num_f"), [(1, 2), (0, 0), (3, 0)])
def test_invalid_counts_are_refused(num_a, num_f):
    with pytest.raises(ValueError, match="num_attention_ranks >= num_ffn_ranks"):
        WorldLayout(num_a, num_f)


def test_out_of_range_ranks_are_refused() -> None:
    layout = WorldLayout(2, 1)
    for call in (
        lambda: layout.global_rank("ffn", 1),
        lambda: layout.global_rank("attention", 2),
        lambda: layout.global_rank("expert", 0),
        lambda: layout.role_of(3),
        lambda: attention_block(1, 2, 1),
        lambda: ffn_rank_for_attention(2, 2, 1),
    ):
        with pytest.raises(ValueError):
            call()


def test_role_rank_from_placement() -> None:
    assert [role_rank(d, t, 2) for d in range(2) for t in range(2)] == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        role_rank(0, 2, 2)
