# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e plan``'s output: the candidate table, the recommendation and the
three papers' figures, as text for people and as JSON for tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afd_e2e.plan.analysis import Analysis
from afd_e2e.plan.profiles import HardwareProfile
from afd_e2e.plan.search import Candidate, SearchResult, SearchSpace
from afd_e2e.plan.types import ModelShape, Workload

SCHEMA_VERSION = 1
HEADER = (
    "plan",
    "m",
    "batch/A",
    "tokens/F",
    "total",
    "TPOT ms",
    "tok/s/dev",
    "binding",
)


@dataclass(frozen=True)
class PlanReport:
    """Everything one ``afd-e2e plan`` run decided."""

    shape: ModelShape
    profile: HardwareProfile
    workload: Workload
    space: SearchSpace
    stage_source: str
    result: SearchResult
    analysis: Analysis
    top: int


def _row(c: Candidate) -> tuple[str, ...]:
    return (
        c.label,
        str(c.micro_batches),
        str(c.batch),
        f"{c.ffn_tokens:.0f}",
        str(c.total_batch),
        f"{c.tpot_s * 1e3:.1f}",
        f"{c.tokens_per_device:.0f}",
        c.binding,
    )


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    out = []
    for row in rows:
        cells = [
            cell.ljust(w) if i in (0, len(row) - 1) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def _model_lines(s: ModelShape) -> list[str]:
    lines = [
        (
            f"  model: {s.num_layers} layers, hidden {s.hidden_size}, "
            f"{s.attention.upper()} with {s.kv_values_per_token} KV values per token "
            "per layer,"
        )
    ]
    if s.routed_experts:
        shared = f" + {s.shared_experts:g} shared" if s.shared_experts else ""
        lines.append(
            f"         {s.routed_experts} experts top-{s.top_k}{shared} in "
            f"{s.moe_layers} of them (S = {s.sparsity:.3f})"
        )
    else:
        lines.append("         dense FFN")
    return lines


def text(report: PlanReport) -> str:
    r, p, w, sp = report.result, report.profile, report.workload, report.space
    lines = [
        (
            f"afd-e2e plan: {report.shape.name} on {p.name} "
            f"({p.devices_per_instance} devices per instance)"
        ),
        *_model_lines(report.shape),
        (
            f"  workload: context {w.context:.0f} tokens ({w.source}), "
            f"TPOT target {w.tpot_s * 1e3:.1f} ms"
        ),
        f"  dtypes: weights {sp.dtype}, KV cache {sp.kv_dtype}",
        f"  stage times: {report.stage_source}",
        *_restricted_lines(sp),
        "",
    ]
    shown = list(r.candidates[: report.top])
    if shown:
        lines += _table([HEADER, *(_row(c) for c in shown)])
    rejected = ", ".join(f"{n} {why}" for why, n in sorted(r.rejected.items()))
    lines.append(
        f"({len(shown)} of {len(r.candidates)} feasible plans"
        + (f"; rejected: {rejected}" if rejected else "")
        + ")"
    )
    best = r.recommended
    lines.append("")
    if best is None:
        lines.append("recommended: none; no plan meets the target (see rejected)")
        return "\n".join(lines) + "\n"
    st = best.stages
    lines += [
        (
            f"recommended: {best.label}, {best.micro_batches} micro-batches of "
            f"{best.batch} sequences per attention instance"
        ),
        (
            f"  TPOT {best.tpot_s * 1e3:.1f} ms, {best.tokens_per_device:.0f} tokens/s "
            f"per device on {best.devices} devices, bound by {best.binding}"
        ),
        (
            f"  per layer and micro-batch: attention {_us(st.attention)}, "
            f"dispatch {_us(st.dispatch)},"
        ),
        f"  FFN {_us(st.ffn)}, combine {_us(st.combine)}",
        "",
    ]
    lines += _paper_lines(report.analysis)
    return "\n".join(lines) + "\n"


def _restricted_lines(sp: SearchSpace) -> list[str]:
    """What ``--evaluate`` and ``--batch`` fixed, if anything."""
    lines = []
    if (sp.min_attention, sp.min_ffn) == (sp.max_attention, sp.max_ffn):
        lines.append(f"  evaluated: only {sp.max_attention}A{sp.max_ffn}F")
    if sp.batch is not None:
        lines += [
            f"  batch: {sp.batch} per attention instance and micro-batch (--batch),",
            "         whatever TPOT it takes",
        ]
    return lines


def _paper_lines(a: Analysis) -> list[str]:
    s3, ms, pr = a.step3, a.megascale, a.provisioning
    lines = [
        "Step-3 (arXiv 2507.19427)",
        f"  stage budget per layer, TPOT / (3 x L): {_us(s3['stage_budget_s'])}",
    ]
    if "moe_ffn_batch" in s3:
        lines.append(
            f"  FFN tokens for full utilisation, B_dense / S: "
            f"{s3['moe_ffn_batch']:.0f} (B_dense {s3['dense_ffn_batch']:.1f}, "
            f"S {s3['sparsity']:.4f})"
        )
    if "min_sparsity" in s3:
        verdict = (
            "the model is at or above it"
            if s3["sparse_enough"]
            else "the model is below it: the network binds before the FFN is "
            "compute bound"
        )
        lines += [
            (
                f"  network limit per FFN instance in that budget: "
                f"{s3['network_batch_limit']:.0f} tokens"
            ),
            f"  minimum sparsity for this hardware: {s3['min_sparsity']:.4f};",
            f"    {verdict}",
        ]
    if "note" in s3:
        lines.append(f"  {s3['note']}")
    if ms:
        rule = ms["min_micro_batches"]
        rule_text = (
            f"m >= 2 (1 + T_c / T_f) -> {rule}"
            if rule is not None
            else "T_c >= T_f: the exchange cannot hide behind compute"
        )
        lines += [
            "MegaScale-Infer (arXiv 2504.02263), recommended plan",
            (
                f"  T_a {_us(ms['t_a_s'])}, T_e {_us(ms['t_e_s'])}, T_c "
                f"{_us(ms['t_c_s'])}, T_c / T_f {ms['t_c_over_t_f']:.2f}"
            ),
            f"  {rule_text}; chosen m = {ms['micro_batches']}",
            f"  Eq. 5 iteration {ms['eq5_iteration_s'] * 1e3:.2f} ms; pipeline "
            f"{ms['pipeline_iteration_s'] * 1e3:.2f} ms"
            + (" (with bubbles)" if ms["bubbles"] else ""),
        ]
    if "r_star" in pr:
        lines += [
            (
                "arXiv 2601.21351 (v1 formulas), B = "
                f"{pr['batch']}, theta = {pr['theta']:.0f}"
            ),
            (
                f"  r_A {pr['r_a']:.2f}, r_C {pr['r_c']:.2f}, r_peak {pr['r_peak']:.2f}"
                f" -> r* = {pr['r_star']:.2f} ({pr['regime']}-bound)"
            ),
            (
                f"  best integer r {pr['best_integer_r']}; recommended A/F "
                f"{pr['recommended_ratio']:.2f}"
            ),
        ]
    elif "note" in pr:
        lines += ["arXiv 2601.21351 (v1 formulas)", f"  {pr['note']}"]
    return lines


def _candidate_json(c: Candidate) -> dict[str, Any]:
    return {
        "plan": c.label,
        "attention_instances": c.attention,
        "ffn_instances": c.ffn,
        "micro_batches": c.micro_batches,
        "batch_per_attention_instance": c.batch,
        "ffn_tokens_per_instance": c.ffn_tokens,
        "total_batch": c.total_batch,
        "devices": c.devices,
        "tpot_s": c.tpot_s,
        "tokens_per_s": c.total_batch / c.tpot_s,
        "tokens_per_s_per_device": c.tokens_per_device,
        "binding": c.binding,
        "stage_times_s": {
            "attention": c.stages.attention,
            "dispatch": c.stages.dispatch,
            "ffn": c.stages.ffn,
            "combine": c.stages.combine,
        },
    }


def as_json(report: PlanReport) -> dict[str, Any]:
    s, w, r, sp = report.shape, report.workload, report.result, report.space
    best = r.recommended
    return {
        "schema_version": SCHEMA_VERSION,
        "model": {
            "name": s.name,
            "source": s.source,
            "hidden_size": s.hidden_size,
            "layers": s.num_layers,
            "moe_layers": s.moe_layers,
            "routed_experts": s.routed_experts,
            "top_k": s.top_k,
            "shared_experts": s.shared_experts,
            "attention": s.attention,
            "kv_values_per_token": s.kv_values_per_token,
            "sparsity": s.sparsity,
        },
        "hardware": report.profile.model_dump(mode="json"),
        "workload": {
            "context": w.context,
            "tpot_s": w.tpot_s,
            "source": w.source,
        },
        "dtype": report.space.dtype,
        "kv_dtype": report.space.kv_dtype,
        "stage_times": report.stage_source,
        "search": {
            "attention_instances": [sp.min_attention, sp.max_attention],
            "ffn_instances": [sp.min_ffn, sp.max_ffn],
            "micro_batches": list(sp.micro_batches),
            "fixed_batch": sp.batch,
        },
        "feasible": len(r.candidates),
        "rejected": r.rejected,
        "candidates": [_candidate_json(c) for c in r.candidates[: report.top]],
        "recommended": None if best is None else _candidate_json(best),
        "step3": report.analysis.step3,
        "megascale_infer": report.analysis.megascale,
        "provisioning": report.analysis.provisioning,
    }
