# SPDX-License-Identifier: Apache-2.0
"""Step-3's sizing model for AFD decoding (arXiv 2507.19427): the per-layer
stage budget, roofline FFN batch, network limit and minimum MoE sparsity.

Also its cost model (section 4.2, Tables 5 and 6) and the throughput relations
of its deployment table (Table 8). Formulas only; no search happens here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from afd_e2e.plan.types import ModelShape

PIPELINE_STAGES = 3
"""Attention, FFN and communication (section 3.1: 50 ms TPOT = 3 x 16.6 ms)."""
EXCHANGE_BYTES_PER_VALUE = 3
"""8-bit dispatch plus 16-bit combine, per hidden value (section 5.4)."""
SECONDS_PER_HOUR = 3600


def stage_budget(tpot_s: float, layers: int, stages: int = PIPELINE_STAGES) -> float:
    """Time each stage may take per layer: TPOT / (stages x L) (section 3.1;
    16.6 ms / 61 = 272 us in section 6)."""
    return tpot_s / (stages * layers)


def roofline(flops: float, bandwidth: float) -> float:
    """Arithmetic intensity at which compute and memory time are equal,
    FLOP/s over bytes/s (Table 4's last column)."""
    return flops / bandwidth


def dense_ffn_batch(flops: float, bandwidth: float, weight_bytes: float = 1) -> float:
    """Tokens a dense FFN needs to be compute bound: 2 B / weight_bytes >=
    FLOPs / bandwidth (section 5.3, 8-bit weights: B >= FLOPs / (2 x BW))."""
    return flops * weight_bytes / (2 * bandwidth)


def moe_ffn_batch(
    flops: float, bandwidth: float, sparsity: float, weight_bytes: float = 1
) -> float:
    """Tokens a MoE FFN of sparsity S needs: B_MoE = B_dense / S (section 5.3)."""
    return dense_ffn_batch(flops, bandwidth, weight_bytes) / sparsity


def network_budget(stage_s: float) -> float:
    """The time budget in the minimum-sparsity bound: 3 H B / Net <= stage
    with B = FLOPs / (2 S BW) leaves H FLOPs L / (Net S BW) <= stage x 2 / 3
    (section 5.4 prints 16.6 ms x 2/3 as 11.1 ms)."""
    return stage_s * 2 / 3


def network_batch_limit(network: float, hidden: int, layer_time_s: float) -> float:
    """Most tokens an FFN instance can exchange per layer within
    ``layer_time_s``: 3 H B / Net <= t (section 5.4)."""
    return network * layer_time_s / (EXCHANGE_BYTES_PER_VALUE * hidden)


def min_sparsity(
    hidden: int,
    layers: int,
    flops: float,
    bandwidth: float,
    network: float,
    budget_s: float,
    weight_bytes: float = 1,
) -> float:
    """Sparsest MoE the hardware keeps compute bound without the network
    binding: S >= H x FLOPs x L / (Net x BW x budget) (section 5.4, Table 7);
    ``budget_s`` is ``network_budget(stage time over all layers)``, ``Net``
    the whole server's NIC bandwidth, FLOPs and BW one device's."""
    return hidden * flops * weight_bytes * layers / (network * bandwidth * budget_s)


def min_activated_experts(min_s: float, routed: int, shared: float) -> float:
    """Routed experts a token must activate for sparsity ``min_s``, shared ones
    counted in both totals: (E + shared) x S - shared (section 5.4: DSv3 needs
    (256 + 1) x 0.058 - 1 = 14)."""
    return (routed + shared) * min_s - shared


@dataclass(frozen=True)
class UnitCosts:
    """USD per FLOP and per byte of memory traffic of one device (Table 5)."""

    per_flop: float
    per_byte: float


def unit_costs(price_per_hour: float, flops: float, bandwidth: float) -> UnitCosts:
    """Price over a device-hour of FLOPs or bytes (section 4.2, Table 5)."""
    return UnitCosts(
        per_flop=price_per_hour / (flops * SECONDS_PER_HOUR),
        per_byte=price_per_hour / (bandwidth * SECONDS_PER_HOUR),
    )


@dataclass(frozen=True)
class TokenWork:
    """One decoded token's work, all layers (a row of Step-3 Tables 2 and 3)."""

    kv_bytes: float
    attention_flops: float
    linear_flops: float
    ffn_flops: float


def token_work(shape: ModelShape, context: float, kv_bytes: float = 1) -> TokenWork:
    """Table 3's row for ``shape`` at ``context`` (8-bit KV by default, as the
    paper assumes)."""
    return TokenWork(
        kv_bytes=shape.kv_bytes(context, kv_bytes),
        attention_flops=shape.attention_core_flops(context),
        linear_flops=shape.attention_linear_flops(),
        ffn_flops=shape.ffn_flops(),
    )


def attention_cost(work: TokenWork, costs: UnitCosts) -> float:
    """USD per token of attention: max(FLOP_attn U_flop, Byte_KV U_byte) +
    FLOP_linear U_flop (section 4.2)."""
    core = max(work.attention_flops * costs.per_flop, work.kv_bytes * costs.per_byte)
    return core + work.linear_flops * costs.per_flop


def ffn_cost(work: TokenWork, costs: UnitCosts) -> float:
    """USD per token of FFN: FLOP_FFN U_flop (section 4.2)."""
    return work.ffn_flops * costs.per_flop


@dataclass(frozen=True)
class AfdCost:
    """The cheapest device for each side and the total, USD per token."""

    attention_device: str
    attention: float
    ffn_device: str
    ffn: float

    @property
    def total(self) -> float:
        return self.attention + self.ffn


def cheapest_afd(work: TokenWork, devices: Mapping[str, UnitCosts]) -> AfdCost:
    """AFD runs each side on its cheapest device, communication ignored
    (section 4.2, Observation 1)."""
    attention = {name: attention_cost(work, c) for name, c in devices.items()}
    ffn = {name: ffn_cost(work, c) for name, c in devices.items()}
    a_best = min(attention, key=lambda name: attention[name])
    f_best = min(ffn, key=lambda name: ffn[name])
    return AfdCost(a_best, attention[a_best], f_best, ffn[f_best])


def tokens_per_device_second(total_batch: float, tpot_s: float, devices: int) -> float:
    """Throughput per device (TGS): B_total / (TPOT x N), Table 8's metric."""
    return total_batch / (tpot_s * devices)


def attention_instances_for_context(
    attention: int, context: float, new_context: float
) -> int:
    """Attention instances that keep the per-instance KV load when the mean
    context changes at the same total batch (section 7.3: 2A at 4K -> 4A at
    8K -> 16A at 32K)."""
    return math.ceil(attention * new_context / context - 1e-9)


def scaled_throughput(
    tokens_per_device: float, attention: int, ffn: int, new_attention: int
) -> float:
    """Per-device throughput after adding attention instances at the same
    total batch and TPOT: TGS x (A + F) / (A' + F) (section 7.3)."""
    return tokens_per_device * (attention + ffn) / (new_attention + ffn)


def attention_batch_limit(
    bandwidth: float,
    layer_time_s: float,
    linear_weight_bytes: float,
    kv_bytes_per_token: float,
    context: float,
) -> float:
    """Sequences one device's attention can serve per layer budget, memory
    bound: (BW x t - linear weights) / (KV bytes per token per layer) / context
    (section 6's L20 example)."""
    tokens = (bandwidth * layer_time_s - linear_weight_bytes) / kv_bytes_per_token
    return tokens / context


def ffn_weights_per_device(
    bandwidth: float, utilisation: float, layer_time_s: float, layers: int
) -> float:
    """FFN weight bytes one device can stream within the per-layer budget,
    all layers (section 6: 864 GB/s x 50% x 272 us x 61 = 7.1 GB on L20)."""
    return bandwidth * utilisation * layer_time_s * layers


def devices_for_ffn_weights(
    weight_bytes: float, per_device: float, devices_per_instance: int
) -> int:
    """Devices, in whole instances, that stream ``weight_bytes`` of FFN within
    the budget (section 6: 300 GB on L20 needs 48)."""
    instances = math.ceil(weight_bytes / (per_device * devices_per_instance))
    return instances * devices_per_instance
