# SPDX-License-Identifier: Apache-2.0
"""Step-3's model (arXiv 2507.19427) reproduces the paper's own figures from
the paper's own inputs: stage budget (sections 3.1, 6), Table 3 from the model
shapes, Tables 4-7, Observation 1, the Table 8 throughput relations and the
section 6 L20 example."""

from __future__ import annotations

import pytest

from afd_e2e.plan import step3
from afd_e2e.plan.profiles import load_profile
from afd_e2e.plan.search import Candidate
from afd_e2e.plan.shapes import builtin_shape
from afd_e2e.plan.types import StageTimes

DEVICES = ("h800", "h20", "a800", "910b")


def _unit_costs() -> dict[str, step3.UnitCosts]:
    out = {}
    for name in DEVICES:
        p = load_profile(name)
        flops = p.flops(p.compute_dtype)  # Table 4 uses FP8 where there is one
        out[p.name] = step3.unit_costs(
            p.cost_per_device_hour, flops, p.memory_bandwidth
        )
    return out


def test_stage_budget_is_272_us_per_layer() -> None:
    # Section 3.1: 50 ms TPOT, 3 stages of 16.6 ms; section 6: 16.6 ms / 61.
    assert step3.stage_budget(3 * 16.6e-3, 61) == pytest.approx(272e-6, abs=0.2e-6)
    # The unrounded 50 ms / 3 / 61 is 273.2 us, within 1.2 us of the paper's.
    assert step3.stage_budget(50e-3, 61) == pytest.approx(273.2e-6, abs=0.1e-6)


@pytest.mark.parametrize(
    ("device", "paper"), [("h800", 591), ("h20", 74), ("a800", 156), ("910b", 175)]
)
def test_table4_rooflines_from_the_builtin_profiles(device: str, paper: int) -> None:
    # Table 4: roofline = FLOPs / bandwidth, FP8 for H800 and H20.
    p = load_profile(device)
    value = step3.roofline(p.flops(p.compute_dtype), p.memory_bandwidth)
    assert round(value) == paper


def test_table5_unit_costs() -> None:
    # Table 5: per FLOP = price / (FLOPs x 3600), per byte = price / (BW x 3600).
    paper = {
        "H800": (2.80e-19, 1.66e-16),
        "H20": (7.51e-19, 5.56e-17),
        "A800": (6.68e-19, 1.04e-16),
        "910B": (6.65e-19, 1.16e-16),
    }
    costs = _unit_costs()
    for name, (per_flop, per_byte) in paper.items():
        # Three printed digits, truncated or rounded: within 0.5%.
        assert costs[name].per_flop == pytest.approx(per_flop, rel=5e-3), name
        assert costs[name].per_byte == pytest.approx(per_byte, rel=5e-3), name


# Table 3 (with Table 2's KV bytes): per token, all layers, 8-bit KV:
# KV bytes, attention FLOPs, linear FLOPs, FFN FLOPs at 8K and 32K context.
TABLE3 = {
    "step-3": {
        8192: (2.56e8, 3.27e10, 2.07e10, 5.33e10),
        32768: (1.02e9, 1.31e11, 2.07e10, 5.33e10),
    },
    "deepseek-v3": {
        8192: (2.88e8, 1.47e11, 2.28e10, 4.84e10),
        32768: (1.15e9, 5.89e11, 2.28e10, 4.84e10),
    },
    "qwen3-235b-a22b": {
        8192: (7.89e8, 2.52e10, 1.34e10, 2.84e10),
        32768: (3.15e9, 1.01e11, 1.34e10, 2.84e10),
    },
}


@pytest.mark.parametrize("model", sorted(TABLE3))
def test_table3_from_the_builtin_model_shapes(model: str) -> None:
    shape = builtin_shape(model)
    for context, paper in TABLE3[model].items():
        work = step3.token_work(shape, context, kv_bytes=1)
        got = (work.kv_bytes, work.attention_flops, work.linear_flops, work.ffn_flops)
        for value, printed in zip(got, paper, strict=True):
            assert float(f"{value:.2e}") == pytest.approx(printed), (model, context)


# Table 6: USD per 1M tokens on H800 / H20 / A800 / 910B.
TABLE6 = {
    ("step-3", 8192): ((0.048, 0.040, 0.040, 0.043), (0.015, 0.040, 0.036, 0.035)),
    ("step-3", 32768): ((0.176, 0.114, 0.120, 0.133), (0.015, 0.040, 0.036, 0.035)),
    ("deepseek-v3", 8192): ((0.054, 0.128, 0.114, 0.113), (0.014, 0.036, 0.032, 0.032)),
    ("deepseek-v3", 32768): (
        (0.197, 0.460, 0.409, 0.407),
        (0.014, 0.036, 0.032, 0.032),
    ),
    ("qwen3-235b-a22b", 8192): (
        (0.135, 0.054, 0.091, 0.101),
        (0.008, 0.021, 0.019, 0.019),
    ),
    ("qwen3-235b-a22b", 32768): (
        (0.527, 0.185, 0.338, 0.376),
        (0.008, 0.021, 0.019, 0.019),
    ),
}


@pytest.mark.parametrize(("model", "context"), sorted(TABLE6))
def test_table6_costs_from_table3_inputs(model: str, context: int) -> None:
    # Section 4.2: attn = max(FLOP_attn U_flop, Byte_KV U_byte) + FLOP_lin U_flop,
    # ffn = FLOP_ffn U_flop; Table 3's printed inputs, Table 5's unit costs.
    work = step3.TokenWork(*TABLE3[model][context])
    costs = list(_unit_costs().values())
    attention, ffn = TABLE6[(model, context)]
    for unit, paper_a, paper_f in zip(costs, attention, ffn, strict=True):
        assert step3.attention_cost(work, unit) * 1e6 == pytest.approx(
            paper_a, abs=0.0015
        )
        assert step3.ffn_cost(work, unit) * 1e6 == pytest.approx(paper_f, abs=0.0015)


def test_observation1_afd_totals() -> None:
    # Observation 1: Step-3 with AFD 0.055 (8K) / 0.129 (32K); Qwen3 MoE
    # 0.062 / 0.193; DSv3 with EP on H800 alone 0.068 / 0.211.
    costs = _unit_costs()
    for model, paper in (
        ("step-3", (0.055, 0.129)),
        ("qwen3-235b-a22b", (0.062, 0.193)),
    ):
        for context, total in zip((8192, 32768), paper, strict=True):
            work = step3.TokenWork(*TABLE3[model][context])
            assert step3.cheapest_afd(work, costs).total * 1e6 == pytest.approx(
                total, abs=0.001
            )
    best = step3.cheapest_afd(step3.TokenWork(*TABLE3["step-3"][8192]), costs)
    assert (best.attention_device, best.ffn_device) in {("H20", "H800")}
    for context, total in zip((8192, 32768), (0.068, 0.211), strict=True):
        work = step3.TokenWork(*TABLE3["deepseek-v3"][context])
        h800 = costs["H800"]
        ep = step3.attention_cost(work, h800) + step3.ffn_cost(work, h800)
        assert ep * 1e6 == pytest.approx(total, abs=0.001)


@pytest.mark.parametrize(
    ("device", "paper"),
    [("h800", 0.058), ("h20", 0.007), ("a800", 0.031), ("910b", 0.034)],
)
def test_table7_minimum_sparsity(device: str, paper: float) -> None:
    # Section 5.4: S >= H FLOPs L / (Net BW 11.1 ms), H = 7168, L = 61, Net the
    # server's 8 NICs (400 Gbps for H800/H20, 200 Gbps for A800/910B). The
    # printed 11.1 ms reproduces all four; 16.6 x 2/3 = 11.067 ms would give
    # 0.0346 -> 0.035 for 910B.
    p = load_profile(device)
    flops = p.flops(p.compute_dtype)
    s = step3.min_sparsity(
        7168, 61, flops, p.memory_bandwidth, p.network_bandwidth, 11.1e-3
    )
    assert round(s, 3) == paper


def test_network_budget_is_two_thirds_of_the_stage() -> None:
    assert round(step3.network_budget(16.6e-3) * 1e3, 1) == 11.1


def test_measured_nics_raise_the_h800_bound_to_0_073() -> None:
    # Section 5.4: at 40 GB/s measured per NIC (Net = 8 x 40 GB/s), 0.073.
    p = load_profile("h800")
    s = step3.min_sparsity(7168, 61, p.flops("fp8"), p.memory_bandwidth, 320e9, 11.1e-3)
    assert round(s, 3) == 0.073


def test_dsv3_would_need_14_activated_experts() -> None:
    # Section 5.4: (256 + 1) x 0.058 - 1 = 14 for DSv3 on H800.
    assert round(step3.min_activated_experts(0.058, 256, 1)) == 14


def test_model_cards_and_sparsity_of_the_builtin_shapes() -> None:
    # Step-3 Table 1: 316B parameters, 38B activated; S = 4/49 = 0.08 (section
    # 5.4: "about 0.08" with the shared expert). DeepSeek-V3: 671B / 37B.
    step = builtin_shape("step-3")
    assert step.total_params == pytest.approx(316e9, rel=0.005)
    assert step.activated_params == pytest.approx(38e9, rel=0.03)
    assert round(step.sparsity, 2) == 0.08
    ds = builtin_shape("deepseek-v3")
    assert ds.total_params == pytest.approx(671e9, rel=0.005)
    assert ds.activated_params == pytest.approx(37e9, rel=0.03)
    assert ds.sparsity == pytest.approx(9 / 257)
    assert (ds.attention, ds.kv_values_per_token, ds.moe_layers) == ("mla", 576, 58)


def test_ffn_batch_for_full_utilisation_on_h800() -> None:
    # Section 5.3: B_dense >= FLOPs / (2 BW) for 8-bit weights, B_MoE = B_dense / S.
    assert step3.dense_ffn_batch(1.98e15, 3.35e12) == pytest.approx(295.5, abs=0.1)
    assert step3.moe_ffn_batch(1.98e15, 3.35e12, 0.08) == pytest.approx(3694, abs=1)
    assert step3.moe_ffn_batch(1.98e15, 3.35e12, 9 / 256) == pytest.approx(8406, abs=1)


def test_table8_throughput_relations() -> None:
    # Section 7.3: 3A4F with 3 micro-batches of 3,072 gives 3,291 TGS at 50 ms
    # on 7 x 8 = 56 GPUs: TGS = B_total / (TPOT x N).
    assert round(step3.tokens_per_device_second(3 * 3072, 0.05, 56)) == 3291
    # The planner's candidates count the same way: 3A4F, 3 micro-batches of
    # 3,072 / 3 per attention instance; 2A2F's 6,144 = 3 x 2,048; 3A2F BF16's
    # 6,048 = 3 micro-batches x 3 instances x 672.
    stages = StageTimes(0, 0, 0, 0)
    c = Candidate(3, 4, 3, 1024, stages, tpot_s=0.05, devices=56, binding="")
    assert (c.total_batch, round(c.tokens_per_device)) == (9216, 3291)
    assert Candidate(2, 2, 3, 1024, stages, 0.05, 32, "").total_batch == 6144
    assert Candidate(3, 2, 3, 672, stages, 0.05, 40, "").total_batch == 6048
    # Context scaling of the 4,039 TGS 2A2F deployment at 4K: 4A2F at 8K,
    # 16A2F at 32K, TGS x (A + F) / (A' + F) = 2,693 and 898.
    a8k = step3.attention_instances_for_context(2, 4096, 8192)
    a32k = step3.attention_instances_for_context(2, 4096, 32768)
    assert (a8k, a32k) == (4, 16)
    assert round(step3.scaled_throughput(4039, 2, 2, a8k)) == 2693
    assert round(step3.scaled_throughput(4039, 2, 2, a32k)) == 898


def test_section6_l20_example() -> None:
    # Attention: 864 GB/s x 272 us = 235 MB, less 67 MB of linear weights, at
    # 512 B per token per layer and 8K context: a batch below 41.
    per_layer = step3.attention_batch_limit(864e9, 272e-6, 0, 1, 1)
    assert per_layer == pytest.approx(235e6, rel=0.001)
    batch = step3.attention_batch_limit(864e9, 272e-6, 67e6, 512, 8192)
    assert 40 < batch < 41
    # FFN at 50% bandwidth: 117 MB per layer, 7.1 GB per GPU over 61 layers;
    # 300 GB of FFN weights needs 48 L20s (6 servers of 8).
    per_gpu = step3.ffn_weights_per_device(864e9, 0.5, 272e-6, 61)
    assert per_gpu / 61 == pytest.approx(117e6, rel=0.01)
    assert per_gpu == pytest.approx(7.1e9, rel=0.01)
    assert step3.devices_for_ffn_weights(300e9, per_gpu, 8) == 48
