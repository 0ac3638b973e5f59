# SPDX-License-Identifier: Apache-2.0
"""What each paper's model says about one planning problem and its
recommended plan: Step-3's budgets and sparsity bound, MegaScale-Infer's
micro-batch rule and Eq. 5, arXiv 2601.21351's r*."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afd_e2e.plan import megascale, provisioning, step3
from afd_e2e.plan.profiles import HardwareProfile
from afd_e2e.plan.search import Candidate
from afd_e2e.plan.stages import StageModel
from afd_e2e.plan.types import DTYPE_BYTES, ModelShape, Workload


@dataclass(frozen=True)
class Analysis:
    step3: dict[str, Any]
    megascale: dict[str, Any]
    provisioning: dict[str, Any]


def analyse(
    shape: ModelShape,
    profile: HardwareProfile,
    workload: Workload,
    model: StageModel,
    dtype: str,
    best: Candidate | None,
) -> Analysis:
    return Analysis(
        step3=_step3(shape, profile, workload, dtype),
        megascale=_megascale(shape, best),
        provisioning=_provisioning(shape, workload, model, best),
    )


def _step3(
    shape: ModelShape, profile: HardwareProfile, workload: Workload, dtype: str
) -> dict[str, Any]:
    budget = step3.stage_budget(workload.tpot_s, shape.num_layers)
    out: dict[str, Any] = {
        "stage_budget_s": budget,
        "sparsity": shape.sparsity,
    }
    flops, bandwidth = profile.flops(dtype), profile.memory_bandwidth
    if flops is None or bandwidth is None:
        out["note"] = f"profile {profile.name} gives no FLOP/s or bandwidth"
        return out
    weight_bytes = DTYPE_BYTES[dtype]
    out["dense_ffn_batch"] = step3.dense_ffn_batch(flops, bandwidth, weight_bytes)
    out["moe_ffn_batch"] = step3.moe_ffn_batch(
        flops, bandwidth, shape.sparsity, weight_bytes
    )
    if profile.network_bandwidth is not None:
        net = profile.network_bandwidth
        out["network_batch_limit"] = step3.network_batch_limit(
            net, shape.hidden_size, budget
        )
        min_s = step3.min_sparsity(
            shape.hidden_size,
            shape.num_layers,
            flops,
            bandwidth,
            net,
            step3.network_budget(workload.tpot_s / step3.PIPELINE_STAGES),
            weight_bytes,
        )
        out["min_sparsity"] = min_s
        out["min_activated_experts"] = step3.min_activated_experts(
            min_s, shape.routed_experts, shape.shared_experts
        )
        out["sparse_enough"] = shape.sparsity >= min_s
    return out


def _megascale(shape: ModelShape, best: Candidate | None) -> dict[str, Any]:
    if best is None:
        return {}
    st = best.stages
    t_c, t_f = st.exchange, st.compute
    out: dict[str, Any] = {
        "t_a_s": st.attention,
        "t_e_s": st.ffn,
        "t_c_s": t_c,
        "t_c_over_t_f": t_c / t_f,
        "micro_batches": best.micro_batches,
        "eq5_iteration_s": megascale.iteration_time(
            st.attention, st.ffn, t_c, best.micro_batches, shape.num_layers
        ),
        "pipeline_iteration_s": best.tpot_s,
        "bubbles": megascale.has_bubbles(st, best.micro_batches),
    }
    try:
        out["min_micro_batches"] = megascale.min_micro_batches(t_c, t_f)
    except ValueError:
        out["min_micro_batches"] = None
    return out


def _provisioning(
    shape: ModelShape, workload: Workload, model: StageModel, best: Candidate | None
) -> dict[str, Any]:
    if best is None:
        return {}
    linear = model.linear(workload.context)
    batch = best.batch
    kv_tokens = provisioning.mean_kv_tokens(batch, workload.context)
    out: dict[str, Any] = {"batch": batch, "theta": workload.context}
    if linear.alpha_f <= 0 or linear.beta_f <= 0:
        out["note"] = "the FFN model needs a positive slope and intercept for r*"
        return out
    ratio = provisioning.optimal_ratio(linear, batch, kv_tokens)
    out.update(
        {
            "r_a": ratio.r_a,
            "r_c": ratio.r_c,
            "r_peak": ratio.r_peak,
            "r_star": ratio.r_star,
            "regime": ratio.regime,
            "best_integer_r": provisioning.best_integer_ratio(
                linear, batch, kv_tokens, max(64, int(ratio.r_star) * 2 + 2)
            ),
            "recommended_ratio": best.attention / best.ffn,
        }
    )
    return out
