# SPDX-License-Identifier: Apache-2.0
"""Memory capacity: weight bytes of each role and how many sequences' KV
cache an attention instance holds. Unknown capacity means no limit."""

from __future__ import annotations

from afd_e2e.plan.profiles import HardwareProfile
from afd_e2e.plan.types import ModelShape

DEFAULT_MEMORY_FRACTION = 0.9
"""Share of device memory a role may use (vLLM's gpu_memory_utilization)."""


def attention_weight_bytes(shape: ModelShape, weight_bytes: float) -> float:
    """Attention projections plus embedding and LM head, all on the
    attention instance (held once per instance, split by tensor parallelism)."""
    return (shape.attention_params_total + shape.embedding_params) * weight_bytes


def ffn_weight_bytes(shape: ModelShape, weight_bytes: float) -> float:
    """All FFN weights, split over the FFN instances."""
    return shape.ffn_params_total * weight_bytes


def instance_bytes(profile: HardwareProfile, fraction: float) -> float | None:
    """Usable memory of one instance (None when the profile does not say)."""
    if profile.memory_bytes is None:
        return None
    return profile.memory_bytes * profile.devices_per_instance * fraction


def max_sequences(
    shape: ModelShape,
    profile: HardwareProfile,
    fraction: float,
    weight_bytes: float,
    kv_bytes: float,
    context: float,
) -> int | None:
    """Sequences of ``context`` tokens one attention instance can cache, over
    all its micro-batches (None: unknown capacity; 0: weights do not fit)."""
    usable = instance_bytes(profile, fraction)
    if usable is None:
        return None
    free = usable - attention_weight_bytes(shape, weight_bytes)
    per_sequence = shape.kv_bytes(context, kv_bytes)
    return max(int(free // per_sequence), 0) if per_sequence > 0 else None


def ffn_fits(
    shape: ModelShape,
    profile: HardwareProfile,
    fraction: float,
    weight_bytes: float,
    ffn_instances: int,
) -> bool:
    usable = instance_bytes(profile, fraction)
    if usable is None:
        return True
    return ffn_weight_bytes(shape, weight_bytes) / ffn_instances <= usable
