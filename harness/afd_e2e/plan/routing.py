# SPDX-License-Identifier: Apache-2.0
"""Where a micro-batch's tokens go under expert parallelism over F FFN
instances: the share of instances each token visits and the experts touched.

Routing is taken as uniform: each token picks top-k of E experts at random and
the experts are split evenly over the instances.
"""

from __future__ import annotations


def instance_hit_fraction(ffn_instances: int, top_k: int) -> float:
    """Chance a token sends to a given FFN instance: 1 - (1 - 1/F)^k (every
    instance for a dense model, whose FFN is split by tensor parallelism)."""
    if ffn_instances <= 1 or top_k <= 0:
        return 1.0
    return 1 - (1 - 1 / ffn_instances) ** top_k


def experts_touched(tokens: float, top_k: int, experts: int) -> float:
    """Expected share of experts at least one of ``tokens`` picks, whose
    weights must be read: 1 - (1 - k/E)^tokens."""
    if experts <= 0:
        return 1.0
    return 1 - (1 - top_k / experts) ** tokens
