# SPDX-License-Identifier: Apache-2.0
"""The analytical A:F ratio (arXiv 2601.21351, v1 formulas): r* = max{r_A,
r_C, r_peak} against brute force over integer and real r, each regime
reachable, and theta, our trace statistic, against the slot load it stands for.

The paper's calibrated coefficients were not accessible (its r* = 9.3 for
DeepSeek-V3 cannot be reproduced), so these are structural checks.
"""

from __future__ import annotations

import math
import random

import pytest

from afd_e2e.plan import provisioning as pv
from afd_e2e.plan.workload import trace_theta


def _random_case(
    rng: random.Random, r_limit: float
) -> tuple[pv.LinearStageModels, int, float]:
    """Seeded random stage models, batch and KV tokens whose r* is below
    ``r_limit`` (so a bounded brute force can find the optimum)."""
    while True:
        models = pv.LinearStageModels(
            alpha_a=10 ** rng.uniform(-11, -8),
            beta_a=rng.uniform(0, 2e-4),
            alpha_c=10 ** rng.uniform(-8, -5),
            beta_c=rng.uniform(0, 5e-5),
            alpha_f=10 ** rng.uniform(-8, -6),
            beta_f=rng.uniform(1e-5, 1e-3),
        )
        batch = rng.choice([16, 64, 256, 1024])
        kv = pv.mean_kv_tokens(batch, rng.uniform(100, 20000))
        if pv.optimal_ratio(models, batch, kv).r_star < r_limit:
            return models, batch, kv


def test_closed_form_matches_brute_force_over_integer_r() -> None:
    rng = random.Random(2601)
    regimes = set()
    for _ in range(500):
        models, batch, kv = _random_case(rng, r_limit=300)
        ratio = pv.optimal_ratio(models, batch, kv)
        regimes.add(ratio.regime)
        best = pv.best_integer_ratio(models, batch, kv, r_max=400)
        if ratio.r_star <= 1:
            assert best == 1
        else:
            # Throughput rises up to r* and falls after it, so the best
            # integer is one of its neighbours.
            assert best in {math.floor(ratio.r_star), math.ceil(ratio.r_star)}
        f = pv.throughput_per_instance
        assert f(models, ratio.r_star, batch, kv) >= f(models, best, batch, kv) * (
            1 - 1e-12
        )
    assert regimes == {"attention", "communication", "ffn"}


def test_closed_form_is_the_real_maximiser() -> None:
    rng = random.Random(11)
    for _ in range(30):
        models, batch, kv = _random_case(rng, r_limit=50)
        ratio = pv.optimal_ratio(models, batch, kv)
        grid = [0.01 * i for i in range(1, 10001)]
        values = [pv.throughput_per_instance(models, r, batch, kv) for r in grid]
        best = grid[values.index(max(values))]
        assert best == pytest.approx(ratio.r_star, abs=0.011)


def test_each_regime_sets_r_star() -> None:
    batch, kv = 256, 256 * 600  # v1's experiment: B = 256, mu_P + mu_D = 600
    ffn_only = pv.LinearStageModels(1e-12, 0, 1e-12, 0, 1e-7, 1e-3)
    ratio = pv.optimal_ratio(ffn_only, batch, kv)
    assert ratio.regime == "ffn"
    assert ratio.r_star == pytest.approx(math.sqrt(1e-3 / (1e-7 * batch)))
    slow_attention = pv.LinearStageModels(1e-7, 0, 1e-12, 0, 1e-7, 1e-4)
    ratio = pv.optimal_ratio(slow_attention, batch, kv)
    assert ratio.regime == "attention"
    # At r_A the FFN takes exactly as long as attention.
    assert slow_attention.t_f(ratio.r_star * batch) == pytest.approx(
        slow_attention.t_a(kv)
    )
    slow_network = pv.LinearStageModels(1e-12, 0, 1e-5, 0, 1e-7, 1e-4)
    ratio = pv.optimal_ratio(slow_network, batch, kv)
    assert ratio.regime == "communication"
    assert slow_network.t_f(ratio.r_star * batch) == pytest.approx(
        slow_network.t_c(batch)
    )


def test_theta_is_the_time_average_slot_load() -> None:
    # A slot holds a request for D steps with P, P + 1, ..., P + D - 1 tokens
    # cached; cycling through the trace, its mean load is theta exactly.
    trace = [(10, 3), (50, 1), (0, 8), (700, 20)]
    loads = [p + j for _ in range(5) for p, d in trace for j in range(d)]
    value = pv.theta([p for p, _ in trace], [d for _, d in trace])
    assert sum(loads) / len(loads) == pytest.approx(value)
    # It is not the mean prompt plus mean decode once decode lengths vary.
    naive = sum(p for p, _ in trace) / 4 + sum(d for _, d in trace) / 4
    assert abs(value - naive) > 10


def test_theta_reduces_to_v1_under_geometric_decode() -> None:
    # v1: T-bar -> B (mu_P + mu_D) with D geometric, mu_D = (1 - p) / p. With
    # v1's experiment (B = 256, mu_P = 100, mu_D = 500): T-bar = 153,600.
    rng = random.Random(42)
    p = 1 / 501  # (1 - p) / p = 500
    decodes = [
        1 + int(math.log(1 - rng.random()) / math.log(1 - p)) for _ in range(40000)
    ]
    value = pv.theta([100.0] * len(decodes), decodes)
    assert value == pytest.approx(600, rel=0.05)
    assert pv.mean_kv_tokens(256, 600) == 153600


def test_theta_from_a_trace_file(tmp_path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_tokens,decode_tokens\n10,3\n50,1\n# comment\n0,8\n")
    value, requests = trace_theta(trace)
    assert requests == 3
    assert value == pytest.approx((10 * 3 + 3 + 50 + 0 * 8 + 28) / 12)
