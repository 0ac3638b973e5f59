# SPDX-License-Identifier: Apache-2.0
"""Role ranks, the attention->FFN mapping and the process-group layout.

Pure functions: FFN ranks come first in the AFD world, attention ranks follow;
attention ranks are spread over FFN ranks in contiguous, balanced blocks
(the CAM P2P connector strides them instead: ``strided_group``). The CAM
async connector puts attention ranks first and lets every attention rank reach
every FFN rank, which owns a contiguous block of experts (``expert_block``).
"""

from __future__ import annotations

from dataclasses import dataclass


def _check_counts(num_attention: int, num_ffn: int) -> None:
    if num_ffn < 1 or num_attention < num_ffn:
        raise ValueError(
            f"need num_attention_ranks >= num_ffn_ranks >= 1, got "
            f"{num_attention} attention and {num_ffn} FFN ranks"
        )


def role_rank(dp_rank: int, tp_rank: int, tp_size: int) -> int:
    """This worker's rank inside its role, from vLLM's DP and TP placement."""
    if not 0 <= tp_rank < tp_size or dp_rank < 0:
        raise ValueError(f"bad placement dp_rank={dp_rank} tp_rank={tp_rank}/{tp_size}")
    return dp_rank * tp_size + tp_rank


def attention_block(ffn_rank: int, num_attention: int, num_ffn: int) -> range:
    """Attention ranks served by one FFN rank; earlier blocks take the remainder."""
    _check_counts(num_attention, num_ffn)
    if not 0 <= ffn_rank < num_ffn:
        raise ValueError(f"ffn_rank {ffn_rank} outside [0, {num_ffn})")
    base, extra = divmod(num_attention, num_ffn)
    start = ffn_rank * base + min(ffn_rank, extra)
    return range(start, start + base + (1 if ffn_rank < extra else 0))


def ffn_rank_for_attention(
    attention_rank: int, num_attention: int, num_ffn: int
) -> int:
    """The FFN rank that serves one attention rank."""
    _check_counts(num_attention, num_ffn)
    if not 0 <= attention_rank < num_attention:
        raise ValueError(
            f"attention_rank {attention_rank} outside [0, {num_attention})"
        )
    base, extra = divmod(num_attention, num_ffn)
    cut = extra * (base + 1)
    if attention_rank < cut:
        return attention_rank // (base + 1)
    return extra + (attention_rank - cut) // base


def strided_group(ffn_rank: int, num_attention: int, num_ffn: int) -> range:
    """Attention ranks one FFN rank serves in the CAM P2P layout: ``r, r + F,
    r + 2F, ...`` (slot ``i`` is attention ``r + i F``)."""
    _check_counts(num_attention, num_ffn)
    if not 0 <= ffn_rank < num_ffn:
        raise ValueError(f"ffn_rank {ffn_rank} outside [0, {num_ffn})")
    return range(ffn_rank, num_attention, num_ffn)


def strided_ffn_rank(attention_rank: int, num_attention: int, num_ffn: int) -> int:
    """The FFN rank of one attention rank in the CAM P2P layout: ``a % F``."""
    _check_counts(num_attention, num_ffn)
    if not 0 <= attention_rank < num_attention:
        raise ValueError(
            f"attention_rank {attention_rank} outside [0, {num_attention})"
        )
    return attention_rank % num_ffn


def expert_block(ffn_rank: int, num_experts: int, num_ffn: int) -> range:
    """Routed experts one FFN rank owns in the CAM async layout: ``ceil(E/F)``
    contiguous experts each, the last rank(s) fewer (possibly none)."""
    if num_experts < 1 or num_ffn < 1:
        raise ValueError(
            f"need num_experts >= 1 and num_ffn_ranks >= 1, got {num_experts} "
            f"experts and {num_ffn} FFN ranks"
        )
    if not 0 <= ffn_rank < num_ffn:
        raise ValueError(f"ffn_rank {ffn_rank} outside [0, {num_ffn})")
    per_rank = -(-num_experts // num_ffn)
    start = min(ffn_rank * per_rank, num_experts)
    return range(start, min(start + per_rank, num_experts))


def home_ffn_rank(attention_rank: int, num_ffn: int) -> int:
    """CAM async: the FFN rank that runs an attention rank's dense and shared
    parts (every FFN rank runs the routed experts it owns)."""
    if attention_rank < 0 or num_ffn < 1:
        raise ValueError(f"bad attention rank {attention_rank} / {num_ffn} FFN ranks")
    return attention_rank % num_ffn


@dataclass(frozen=True)
class WorldLayout:
    """Global ranks of one AFD world: ``[ffn 0..F-1, attention 0..A-1]``, or
    with ``attention_first`` ``[attention 0..A-1, ffn 0..F-1]`` (CAM async,
    where any positive sizes pair: every attention rank reaches every FFN
    rank)."""

    num_attention: int
    num_ffn: int
    attention_first: bool = False

    def __post_init__(self) -> None:
        if not self.attention_first:
            _check_counts(self.num_attention, self.num_ffn)
        elif self.num_attention < 1 or self.num_ffn < 1:
            raise ValueError(
                f"need num_attention_ranks >= 1 and num_ffn_ranks >= 1, got "
                f"{self.num_attention} attention and {self.num_ffn} FFN ranks"
            )

    @property
    def _offsets(self) -> tuple[int, int]:
        """(first attention rank, first FFN rank) in the world."""
        if self.attention_first:
            return 0, self.num_attention
        return self.num_ffn, 0

    @property
    def world_size(self) -> int:
        return self.num_attention + self.num_ffn

    def global_rank(self, role: str, rank: int) -> int:
        if role == "ffn":
            if not 0 <= rank < self.num_ffn:
                raise ValueError(f"ffn rank {rank} outside [0, {self.num_ffn})")
            return self._offsets[1] + rank
        if role == "attention":
            if not 0 <= rank < self.num_attention:
                raise ValueError(
                    f"attention rank {rank} outside [0, {self.num_attention})"
                )
            return self._offsets[0] + rank
        raise ValueError(f"role must be 'attention' or 'ffn', got {role!r}")

    def role_of(self, global_rank: int) -> tuple[str, int]:
        if not 0 <= global_rank < self.world_size:
            raise ValueError(
                f"global rank {global_rank} outside [0, {self.world_size})"
            )
        first_attention, first_ffn = self._offsets
        if first_ffn <= global_rank < first_ffn + self.num_ffn:
            return ("ffn", global_rank - first_ffn)
        return ("attention", global_rank - first_attention)

    def peer_of(self, role: str, rank: int) -> int:
        """Global rank of the FFN peer of an attention rank (as seen by it)."""
        if role != "attention":
            raise ValueError("peer_of is defined for attention ranks")
        return self.global_rank(
            "ffn", ffn_rank_for_attention(rank, self.num_attention, self.num_ffn)
        )
