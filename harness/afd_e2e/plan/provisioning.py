# SPDX-License-Identifier: Apache-2.0
"""The analytical A:F ratio of arXiv 2601.21351: r* = max{r_A, r_C, r_peak}
from linear stage models, and the workload statistic theta from a trace.

Version: the formulas are those of v1 (2026-01-29, "Theoretically Optimal
Attention/FFN Ratios in Disaggregated LLM Serving"), taken from secondary notes
on it: no version's full text was accessible. v3/v4 ("Analytical Provisioning
for Attention-FFN Disaggregated LLM Serving under Stochastic Workloads") keep
the three regimes but name theta without a definition we could read; theta
here is our choice, stated on ``theta``. v4's Gaussian barrier refinement is
not implemented.

The model: r attention instances feed one FFN instance, B sequences each;
t_A(T) = a_A T + b_A over the T KV tokens of an instance's batch, t_C(B) =
a_C B + b_C, t_F(rB) = a_F r B + b_F; the cycle is tau = max of the three and
each instance yields r B / ((r + 1) tau) tokens per unit time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LinearStageModels:
    """Per-layer stage times, seconds: attention per KV token, exchange and
    FFN per token (one FFN instance)."""

    alpha_a: float
    beta_a: float
    alpha_c: float
    beta_c: float
    alpha_f: float
    beta_f: float

    def t_a(self, kv_tokens: float) -> float:
        return self.alpha_a * kv_tokens + self.beta_a

    def t_c(self, batch: float) -> float:
        return self.alpha_c * batch + self.beta_c

    def t_f(self, tokens: float) -> float:
        return self.alpha_f * tokens + self.beta_f


def cycle_time(m: LinearStageModels, r: float, batch: float, kv_tokens: float) -> float:
    """tau = max{t_A(T), t_C(B), t_F(r B)}."""
    return max(m.t_a(kv_tokens), m.t_c(batch), m.t_f(r * batch))


def throughput_per_instance(
    m: LinearStageModels, r: float, batch: float, kv_tokens: float
) -> float:
    """Tokens per second per instance: r B / ((r + 1) tau)."""
    return r * batch / ((r + 1) * cycle_time(m, r, batch, kv_tokens))


def r_attention(m: LinearStageModels, batch: float, kv_tokens: float) -> float:
    """r_A: the ratio at which the FFN becomes as slow as attention,
    (a_A T + b_A - b_F) / (a_F B)."""
    return (m.alpha_a * kv_tokens + m.beta_a - m.beta_f) / (m.alpha_f * batch)


def r_communication(m: LinearStageModels, batch: float) -> float:
    """r_C: the ratio at which the FFN becomes as slow as the exchange,
    (a_C B + b_C - b_F) / (a_F B)."""
    return (m.alpha_c * batch + m.beta_c - m.beta_f) / (m.alpha_f * batch)


def r_peak(m: LinearStageModels, batch: float) -> float:
    """r_peak = sqrt(b_F / (a_F B)): where r B / ((r + 1)(a_F r B + b_F)),
    the throughput once the FFN binds, peaks."""
    return math.sqrt(m.beta_f / (m.alpha_f * batch))


@dataclass(frozen=True)
class Ratio:
    """r* and the three candidates it is the largest of."""

    r_star: float
    r_a: float
    r_c: float
    r_peak: float

    @property
    def regime(self) -> str:
        """Which bottleneck sets r*: attention, communication or ffn."""
        if self.r_star == self.r_peak:
            return "ffn"
        return "attention" if self.r_star == self.r_a else "communication"


def optimal_ratio(m: LinearStageModels, batch: float, kv_tokens: float) -> Ratio:
    """Theorem 4.4 (v1): r* = max{r_A, r_C, r_peak}, the real r that
    maximises throughput per instance."""
    r_a = r_attention(m, batch, kv_tokens)
    r_c = r_communication(m, batch)
    peak = r_peak(m, batch)
    return Ratio(max(r_a, r_c, peak), r_a, r_c, peak)


def best_integer_ratio(
    m: LinearStageModels, batch: float, kv_tokens: float, r_max: int
) -> int:
    """Brute force: the integer r in 1..r_max with the highest throughput per
    instance (the check on the closed form)."""
    return max(
        range(1, r_max + 1),
        key=lambda r: throughput_per_instance(m, r, batch, kv_tokens),
    )


def mean_kv_tokens(batch: float, theta_value: float) -> float:
    """Proposition 4.3 (v1): the horizon-average KV tokens of a batch of B
    slots tends to B x theta (theta = mu_P + mu_D under geometric decode)."""
    return batch * theta_value


def theta(prompts: Sequence[float], decodes: Sequence[float]) -> float:
    """Our theta: the time-average KV tokens of one batch slot, by the
    renewal-reward theorem over the trace's requests (prompt P, decode D),
    E[P D + D (D - 1) / 2] / E[D]: a request holds its slot for D steps with
    P, P + 1, ..., P + D - 1 cached tokens.

    A choice, not v4's published definition (not accessible). For independent
    P and D ~ Geometric(p) on {1, 2, ...} it equals mu_P + (1 - p) / p, v1's
    mu_P + mu_D, so it agrees with v1 where v1 applies and stays correct for
    traces whose decode lengths are not geometric.
    """
    if len(prompts) != len(decodes) or not prompts:
        raise ValueError("theta needs equally many prompt and decode lengths, > 0")
    steps = sum(decodes)
    if steps <= 0:
        raise ValueError("theta needs at least one decode step in the trace")
    reward = sum(p * d + d * (d - 1) / 2 for p, d in zip(prompts, decodes, strict=True))
    return reward / steps
