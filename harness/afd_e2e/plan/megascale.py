# SPDX-License-Identifier: Apache-2.0
"""MegaScale-Infer's ping-pong pipeline model (arXiv 2504.02263): the
roofline batch, micro-batch rule, iteration time and linear stage fits.

Sections 2.3 (roofline), 4.1 (ping-pong pipeline, Eq. 5) and 4.2 (plan
search: N_m = 4, linear stage times, balanced attention instances).
"""

from __future__ import annotations

import math

from afd_e2e.plan.types import StageTimes

MAX_MICRO_BATCHES = 4
"""N_m of Algorithm 1 (section 4.2): micro-batches tried are at most 4."""


def compute_bound_batch(flops: float, bandwidth: float) -> float:
    """Tokens per expert for a compute-bound GEMM: 2 b h n / F >= 2 h n / B
    gives b >= F / B (section 2.3: 156 on A100)."""
    return flops / bandwidth


def tokens_per_expert(batch: float, top_k: int, experts: int) -> float:
    """Tokens each expert sees when ``batch`` tokens pick ``top_k`` of
    ``experts`` evenly (section 2.3: 156 x 2 / 8 = 39 for Mixtral)."""
    return batch * top_k / experts


def expert_utilisation(
    batch: float, top_k: int, experts: int, flops: float, bandwidth: float
) -> float:
    """FFN utilisation of a MoE layer: min(topk / #expert x B / F x b, 1)
    (section 2.3; 25% MFU for Mixtral at b = 156 on A100)."""
    return min(tokens_per_expert(batch, top_k, experts) * bandwidth / flops, 1.0)


def min_micro_batches(t_c: float, t_f: float) -> int:
    """Fewest micro-batches that keep both sides busy, m >= 2 (1 + T_c / T_f)
    (section 4.1): 3 while T_c <= T_f / 2, else 4. Raises ``ValueError`` when
    T_c >= T_f, which breaks the pipeline's condition (2)."""
    if t_f <= 0:
        raise ValueError(f"T_f must be positive, got {t_f!r}")
    if t_c >= t_f:
        raise ValueError(
            f"T_c ({t_c:.3g} s) must be below T_f ({t_f:.3g} s): communication "
            "cannot hide behind computation"
        )
    return math.ceil(2 * (1 + t_c / t_f) - 1e-12)


def iteration_time(t_a: float, t_e: float, t_c: float, m: int, layers: int) -> float:
    """Eq. 5: one decode iteration, (T_a + T_e + 2 T_c) + T_f (m L - 1) with
    T_f = max{T_a, T_e}; exact when ``m`` satisfies ``min_micro_batches``."""
    t_f = max(t_a, t_e)
    return (t_a + t_e + 2 * t_c) + t_f * (m * layers - 1)


def pipeline_time(stages: StageTimes, m: int, layers: int) -> float:
    """One decode iteration of the ping-pong pipeline for any ``m``; Eq. 5
    when nothing waits, and the longer, bubbled schedule otherwise.

    Not in the paper: its generalisation, derived here. Each resource
    (attention, dispatch link, FFN, combine link) serves the m x L micro-batch
    layers in order, so the iteration is the longest path through them: with
    w returns from the combine to the next layer's attention it is
    (w + 1) R + (m L - 1 - m w) T_max (R the no-wait round trip, T_max the
    busiest stage), linear in w, so w = 0 (Eq. 5) or w = L - 1.
    """
    r, t_max = stages.round_trip, stages.bottleneck
    return max(r + (m * layers - 1) * t_max, layers * r + (m - 1) * t_max)


def has_bubbles(stages: StageTimes, m: int) -> bool:
    """True when a micro-batch comes back before its resource is free again
    (m T_max < R): the pipeline then waits on latency, not on a stage."""
    return m * stages.bottleneck < stages.round_trip


def balanced_attention_instances(
    k1: float, k3: float, experts: int, top_k: int
) -> float:
    """n_a = k1 E / (k3 K): attention instances per expert group that make
    T_a = k1 b_a + k2 equal T_e = k3 b_e + k4 given b_a n_a = b_e E / K
    (section 4.2, intercepts aside)."""
    return k1 * experts / (k3 * top_k)


def throughput_per_cost(global_batch: float, t_total: float, cost: float) -> float:
    """tpuc = (B / T_total) / cost (section 4.2's objective)."""
    return global_batch / t_total / cost
