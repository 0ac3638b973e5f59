# SPDX-License-Identifier: Apache-2.0
"""The plan search: every (A, F, micro-batches) in range, each with the
largest batch that meets the TPOT target and fits in memory, ranked by
tokens per second per device; the first is the recommendation.

TPOT is one decode iteration of MegaScale-Infer's ping-pong pipeline
(``megascale.pipeline_time``); throughput per device is Step-3's
B_total / (TPOT x N) (``step3.tokens_per_device_second``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from afd_e2e.plan import capacity
from afd_e2e.plan.megascale import MAX_MICRO_BATCHES, has_bubbles, pipeline_time
from afd_e2e.plan.profiles import HardwareProfile
from afd_e2e.plan.stages import StageModel
from afd_e2e.plan.step3 import tokens_per_device_second
from afd_e2e.plan.types import DTYPE_BYTES, ModelShape, StageTimes, Workload


@dataclass(frozen=True)
class SearchSpace:
    """What the search may choose."""

    max_attention: int = 16
    """Most attention instances (Step-3 section 7.3 goes to 16A2F)."""
    max_ffn: int = 8
    """Most FFN instances."""
    min_attention: int = 1
    """Fewest attention instances (``--evaluate A:F`` sets both bounds to A)."""
    min_ffn: int = 1
    """Fewest FFN instances (``--evaluate A:F`` sets both bounds to F)."""
    batch: int | None = None
    """Sequences per attention instance per micro-batch, fixed (``--batch``):
    each plan is evaluated at this batch, whether it meets the TPOT target or
    not (binding ``fixed-batch``); None searches the largest batch that does."""
    micro_batches: tuple[int, ...] = tuple(range(1, MAX_MICRO_BATCHES + 1))
    """Micro-batch counts tried (MegaScale-Infer: at most 4)."""
    max_batch: int = 1 << 16
    """Most sequences per attention instance per micro-batch."""
    memory_fraction: float = capacity.DEFAULT_MEMORY_FRACTION
    """Share of device memory the roles may use."""
    dtype: str = "fp8"
    """Weights, matmuls and the dispatch."""
    kv_dtype: str = "bf16"
    """KV cache and the attention core."""


@dataclass(frozen=True)
class Candidate:
    """One deployment and what it is predicted to do."""

    attention: int
    ffn: int
    micro_batches: int
    batch: int
    """Sequences per attention instance per micro-batch."""
    stages: StageTimes
    tpot_s: float
    devices: int
    binding: str
    """What stops the batch growing: kv-memory, batch-cap, or tpot:<stage>
    (attention, ffn, exchange, or pipeline when the pipeline has bubbles);
    fixed-batch when the batch was given (``SearchSpace.batch``)."""

    @property
    def label(self) -> str:
        return f"{self.attention}A{self.ffn}F"

    @property
    def total_batch(self) -> int:
        """Sequences decoding at once: A x m x batch."""
        return self.attention * self.micro_batches * self.batch

    @property
    def ffn_tokens(self) -> float:
        """Tokens one FFN instance computes per micro-batch: A x batch / F."""
        return self.attention * self.batch / self.ffn

    @property
    def tokens_per_device(self) -> float:
        """Tokens per second per device."""
        return tokens_per_device_second(self.total_batch, self.tpot_s, self.devices)


@dataclass(frozen=True)
class SearchResult:
    candidates: tuple[Candidate, ...]
    """Feasible plans, best first."""
    rejected: dict[str, int] = field(default_factory=dict)
    """Infeasible (A, F, m) combinations by reason."""

    @property
    def recommended(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


def _largest_batch(ok: Callable[[int], bool], upper: int) -> int:
    """Largest b in 1..upper with ok(b), ok monotone; 0 if none."""
    if upper < 1 or not ok(1):
        return 0
    low, high = 1, upper
    while low < high:
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


def evaluate(
    model: StageModel,
    shape: ModelShape,
    workload: Workload,
    attention: int,
    ffn: int,
    m: int,
    batch: int,
) -> tuple[StageTimes, float]:
    """Stage times and TPOT of one deployment at one batch."""
    stages = model.times(attention, ffn, batch, workload.context)
    return stages, pipeline_time(stages, m, shape.num_layers)


def search(
    model: StageModel,
    shape: ModelShape,
    profile: HardwareProfile,
    workload: Workload,
    space: SearchSpace,
) -> SearchResult:
    weight_bytes = DTYPE_BYTES[space.dtype]
    kv_cap = capacity.max_sequences(
        shape,
        profile,
        space.memory_fraction,
        weight_bytes,
        DTYPE_BYTES[space.kv_dtype],
        workload.context,
    )
    rejected: Counter[str] = Counter()
    found = []
    for f in range(space.min_ffn, space.max_ffn + 1):
        fits = capacity.ffn_fits(shape, profile, space.memory_fraction, weight_bytes, f)
        for a in range(space.min_attention, space.max_attention + 1):
            for m in space.micro_batches:
                if not fits:
                    rejected["ffn-memory"] += 1
                    continue
                limit = space.max_batch if kv_cap is None else kv_cap // m
                limit = min(limit, space.max_batch)
                if limit < 1:
                    rejected["kv-memory"] += 1
                    continue

                if space.batch is not None:
                    if space.batch > limit:
                        rejected["kv-memory"] += 1
                        continue
                    batch = space.batch
                else:

                    def ok(b: int, a: int = a, f: int = f, m: int = m) -> bool:
                        _, tpot = evaluate(model, shape, workload, a, f, m, b)
                        return tpot <= workload.tpot_s

                    batch = _largest_batch(ok, limit)
                if batch == 0:
                    rejected["tpot"] += 1
                    continue
                stages, tpot = evaluate(model, shape, workload, a, f, m, batch)
                found.append(
                    Candidate(
                        attention=a,
                        ffn=f,
                        micro_batches=m,
                        batch=batch,
                        stages=stages,
                        tpot_s=tpot,
                        devices=(a + f) * profile.devices_per_instance,
                        binding=_binding(batch, limit, kv_cap, space, stages, m),
                    )
                )
    found.sort(
        key=lambda c: (
            -round(c.tokens_per_device, 6),
            c.devices,
            c.micro_batches,
            c.attention,
        )
    )
    return SearchResult(tuple(found), dict(rejected))


def _binding(
    batch: int,
    limit: int,
    kv_cap: int | None,
    space: SearchSpace,
    stages: StageTimes,
    m: int,
) -> str:
    if space.batch is not None:
        return "fixed-batch"
    if batch == limit:
        if kv_cap is not None and kv_cap // m <= space.max_batch:
            return "kv-memory"
        return "batch-cap"
    if has_bubbles(stages, m):
        return "tpot:pipeline"
    return f"tpot:{stages.slowest()[0]}"
