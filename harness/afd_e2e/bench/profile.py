# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e bench --profile``'s arithmetic: the ``AFD_STEP_TIMING`` lines of
one load window turned into one calibration row for ``afd-e2e plan``.

Pure (no torch, no vLLM, no servers). The row is per decoder layer and per
micro-batch, in seconds, on a 1A1F deployment with one micro-batch per step:

- ``attention_s = (between + runner + announce + compute) / L``: everything
  the attention role does in a step that is not waiting on the FFN role: the
  engine loop (scheduling, output processing), the runner outside the model
  (input preparation, sampling), the control payloads, and the model call's
  own work (embedding, norms, attention, the residual adds). The per-step
  overheads are spread over the L layers on purpose: the planner's iteration
  is L times the per-layer stages and has no per-step term, so a cost left
  out here would be left out of every prediction.
- ``ffn_s = ffn.compute / L``: the FFN role's own compute (the dense MLP of
  the first layers, the router, the routed and shared experts), measured on
  the FFN role. Its ``control`` and ``recv`` are idle time (waiting for the
  attention role) and its ``send`` is counted in the exchange below.
- ``exchange_s = (send + wait - ffn.compute) / L``: the attention role's
  round trip through the connector (``send`` hands a layer's input over,
  ``wait`` lasts until the output is back) less the FFN compute inside it.
  What is left is both transfers, the FFN role's wake-up and its ``send``,
  the attention role's wake-up, and any time either process waited for a
  core: on a shared CPU that scheduling delay is real exchange latency, not
  transfer time.

The three add up to the attention role's step, so on 1A1F the planner's
iteration (L x the stages, one micro-batch) is the measured step. The FFN
times come from the FFN role's lines of the same window; its windows of W
steps are not aligned with the attention role's, which is harmless under a
steady load and the reason a negative exchange (noise) is reported, not hidden.

L is ``num_hidden_layers`` from the model's ``config.json``: every decoder
layer exchanges (dense MLP layers run on the FFN role too), and it is the L
the planner multiplies back by. ``batch`` is not the requested concurrency
but the measured mean of sequences decoded per step: generated tokens over
engine steps, both from the server's own counters over the window.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from afd_plugin.step_timing import ATTENTION_PARTS, TAG, parse_line

ROLES = ("attention", "ffn")
COLUMNS = ("batch", "attention_s", "ffn_s", "exchange_s")
"""The calibration file's columns (``afd_e2e.plan.calibration``)."""

Timing = dict[str, float | str]
"""One parsed ``AFD_STEP_TIMING`` line: role, steps, step_ms and the parts."""


def timing_lines(text: str) -> list[Timing]:
    """Every ``AFD_STEP_TIMING`` line of a log's text, parsed, in order."""
    return [t for t in map(parse_line, text.splitlines()) if t is not None]


def count_lines(text: str, role: str) -> int:
    """How many timing lines of ``role`` the text holds."""
    return text.count(f"{TAG} role={role} ")


def mean_parts(lines: Iterable[Timing], role: str) -> dict[str, float]:
    """Per-step means (ms) of ``step_ms`` and every part over ``role``'s lines,
    each line weighted by its steps; raises ``ValueError`` without any."""
    mine = [t for t in lines if t["role"] == role]
    steps = sum(float(t["steps"]) for t in mine)
    if not mine or steps <= 0:
        raise ValueError(f"no {TAG} line of the {role} role in the window")
    keys = {k for t in mine for k in t if k not in ("role", "steps")}
    means = {
        k: sum(float(t.get(k, 0.0)) * float(t["steps"]) for t in mine) / steps
        for k in sorted(keys)
    }
    means["steps"] = steps
    return means


@dataclass(frozen=True)
class CalibrationRow:
    """One row of the calibration file, seconds per layer and micro-batch."""

    batch: float
    attention_s: float
    ffn_s: float
    exchange_s: float
    context: float | None = None
    """Mean KV tokens per sequence during the window (kept in the JSON)."""


def derive_row(
    batch: float,
    attention: Mapping[str, float],
    ffn: Mapping[str, float],
    layers: int,
    context: float | None = None,
) -> CalibrationRow:
    """The row of one window from both roles' per-step means in ms
    (``mean_parts``); the derivation is this module's docstring."""
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    missing = [f"attention.{p}" for p in ATTENTION_PARTS if p not in attention]
    missing += [f"ffn.{p}" for p in ("compute",) if p not in ffn]
    if missing:
        raise ValueError(f"timing parts missing: {', '.join(missing)}")
    own = sum(attention[p] for p in ("between", "runner", "announce", "compute"))
    round_trip = attention["send"] + attention["wait"]
    per_layer_s = 1e-3 / layers
    return CalibrationRow(
        batch=batch,
        attention_s=own * per_layer_s,
        ffn_s=ffn["compute"] * per_layer_s,
        exchange_s=(round_trip - ffn["compute"]) * per_layer_s,
        context=context,
    )


def row_problems(row: CalibrationRow, concurrency: int) -> list[str]:
    """What makes a row unfit to calibrate with, each naming the window."""
    where = f"concurrency {concurrency} (batch {row.batch:.2f})"
    out = []
    if row.batch < 1:
        out.append(f"{where}: fewer than one sequence decoded per step")
    if row.exchange_s < 0:
        out.append(
            f"{where}: exchange_s {row.exchange_s:.3g} s < 0: the FFN role's "
            "compute exceeds the attention role's send + wait over the window "
            "(their windows disagree: a noisy run; measure more windows)"
        )
    for name in ("attention_s", "ffn_s"):
        if getattr(row, name) <= 0:
            out.append(f"{where}: {name} is not positive")
    return out


def model_layers(model_path: str | Path) -> int:
    """``num_hidden_layers`` of the model's ``config.json``."""
    config = Path(model_path) / "config.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    text_config = data.get("text_config") or {}
    layers = data.get("num_hidden_layers", text_config.get("num_hidden_layers"))
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"{config}: no positive integer num_hidden_layers")
    return layers


def calibration_csv(
    rows: Sequence[CalibrationRow], comments: Sequence[str] = ()
) -> str:
    """The calibration file (``afd_e2e/plan_profiles/README.md``): ``#``
    comments, the header, one row per window. No ``context`` column: the
    attention stage charged here is mostly per-step work that does not grow
    with the KV tokens, which a per-KV-token fit would scale wrongly; each
    row's context is in a comment instead."""
    lines = [f"# {c}" for c in comments]
    lines += [
        f"# batch {r.batch:.3f}: mean context {r.context:.0f} tokens per sequence"
        for r in rows
        if r.context is not None
    ]
    lines.append(",".join(COLUMNS))
    lines += [
        f"{r.batch:.4f},{r.attention_s:.6e},{r.ffn_s:.6e},{r.exchange_s:.6e}"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def row_json(row: CalibrationRow) -> dict[str, Any]:
    return asdict(row)
