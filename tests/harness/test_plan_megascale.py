# SPDX-License-Identifier: Apache-2.0
"""MegaScale-Infer's model (arXiv 2504.02263): the section 2.3 roofline
figures on A100, the section 4.1 micro-batch rule and Eq. 5 against an
event-by-event simulation of the ping-pong pipeline, and section 4.2's
balanced attention instances."""

from __future__ import annotations

import random

import pytest

from afd_e2e.plan import megascale
from afd_e2e.plan.profiles import load_profile
from afd_e2e.plan.types import StageTimes


def simulate(stages: StageTimes, m: int, layers: int) -> float:
    """Run the pipeline job by job: each micro-batch goes attention ->
    dispatch -> FFN -> combine per layer; each resource serves one job at a
    time in (layer, micro-batch) order. Returns when the last one is back."""
    durations = (stages.attention, stages.dispatch, stages.ffn, stages.combine)
    free = [0.0] * 4
    ready = [0.0] * m
    for _ in range(layers):
        for j in range(m):
            t = ready[j]
            for resource, duration in enumerate(durations):
                t = max(t, free[resource]) + duration
                free[resource] = t
            ready[j] = t
    return max(ready)


def test_a100_needs_156_tokens_per_expert() -> None:
    # Section 2.3: b >= F / B = 312 TFLOPS / 2 TB/s = 156 (built-in A100 profile).
    p = load_profile("a100")
    assert megascale.compute_bound_batch(p.flops("bf16"), p.memory_bandwidth) == 156


def test_mixtral_sees_39_tokens_per_expert_at_25_percent_mfu() -> None:
    # Section 2.3: Mixtral 8x22B, top-2 of 8, a batch of 156: 39 tokens per
    # expert and 25% MFU.
    assert megascale.tokens_per_expert(156, 2, 8) == 39
    util = megascale.expert_utilisation(156, 2, 8, 312e12, 2e12)
    assert util == pytest.approx(0.25)
    assert megascale.expert_utilisation(624, 2, 8, 312e12, 2e12) == 1.0


@pytest.mark.parametrize(
    ("t_c", "t_f", "m"),
    [(0.1, 1.0, 3), (0.5, 1.0, 3), (0.51, 1.0, 4), (0.99, 1.0, 4), (0.0, 1.0, 2)],
)
def test_micro_batch_rule(t_c: float, t_f: float, m: int) -> None:
    # Section 4.1: m >= 2 (1 + T_c / T_f): 3 while T_c <= T_f / 2, else 4.
    assert megascale.min_micro_batches(t_c, t_f) == m


def test_micro_batch_rule_refuses_exchange_slower_than_compute() -> None:
    # Condition (2), T_c < T_f: otherwise no m hides the communication.
    with pytest.raises(ValueError, match="must be below T_f"):
        megascale.min_micro_batches(1.0, 1.0)


def _random_stages(rng: random.Random) -> StageTimes:
    t_f = rng.uniform(0.5, 2.0)
    other = t_f * rng.uniform(0.6, 1.0)  # condition (1): T_a ~ T_e
    t_a, t_e = (t_f, other) if rng.random() < 0.5 else (other, t_f)
    t_c = t_f * rng.uniform(0.05, 0.95)  # condition (2): T_c < T_f
    return StageTimes(attention=t_a, dispatch=t_c, ffn=t_e, combine=t_c)


def test_eq5_is_the_pipeline_whenever_m_meets_the_rule() -> None:
    rng = random.Random(5)
    for _ in range(300):
        st = _random_stages(rng)
        layers = rng.randint(1, 61)
        rule = megascale.min_micro_batches(st.exchange, st.compute)
        for m in range(rule, 7):
            eq5 = megascale.iteration_time(st.attention, st.ffn, st.exchange, m, layers)
            assert simulate(st, m, layers) == pytest.approx(eq5, rel=1e-12)


def test_below_the_rule_the_pipeline_waits() -> None:
    # T_a = T_e = 1, T_c = 0.6: the rule asks for m >= 3.2, so 4; with m = 3 a
    # micro-batch returns after 3.2 while attention is free after 3.
    st = StageTimes(attention=1.0, dispatch=0.6, ffn=1.0, combine=0.6)
    assert megascale.min_micro_batches(0.6, 1.0) == 4
    eq5 = megascale.iteration_time(1.0, 1.0, 0.6, 3, 10)
    assert simulate(st, 3, 10) > eq5 + 1.0
    assert simulate(st, 4, 10) == pytest.approx(
        megascale.iteration_time(1.0, 1.0, 0.6, 4, 10)
    )


def test_pipeline_time_matches_the_simulation_for_any_m() -> None:
    # pipeline_time generalises Eq. 5 to bubbled schedules and unequal links.
    rng = random.Random(7)
    for _ in range(400):
        st = StageTimes(*(rng.uniform(0.01, 2.0) for _ in range(4)))
        m, layers = rng.randint(1, 4), rng.randint(1, 40)
        assert megascale.pipeline_time(st, m, layers) == pytest.approx(
            simulate(st, m, layers), rel=1e-12
        )
        assert megascale.has_bubbles(st, m) == (m * st.bottleneck < st.round_trip)


def test_eq4_lower_bound_holds() -> None:
    # Eq. 4: (T_a + T_e + 2 T_c) + m T_f (L - 1) <= T_iter.
    t_a, t_e, t_c, m, layers = 1.0, 0.8, 0.3, 3, 61
    lower = (t_a + t_e + 2 * t_c) + m * max(t_a, t_e) * (layers - 1)
    assert lower <= megascale.iteration_time(t_a, t_e, t_c, m, layers)


def test_balanced_attention_instances_equalise_the_stages() -> None:
    # Section 4.2: n_a = k1 E / (k3 K) with b_a n_a = b_e E / K makes
    # T_a - k2 = k1 b_a equal T_e - k4 = k3 b_e.
    k1, k3, experts, top_k, b_a = 2.0e-6, 0.5e-6, 8, 2, 100
    n_a = megascale.balanced_attention_instances(k1, k3, experts, top_k)
    b_e = b_a * n_a * top_k / experts
    assert k1 * b_a == pytest.approx(k3 * b_e)
    assert n_a == pytest.approx(16.0)


def test_throughput_per_cost() -> None:
    assert megascale.throughput_per_cost(1000, 0.05, 4.0) == pytest.approx(5000)
