# SPDX-License-Identifier: Apache-2.0
"""Measured stage times and the linear fits made from them
(``afd-e2e plan --calibration FILE``).

The file (CSV with a header, or JSON: a list of objects or ``{"rows": [...]}``)
has one row per measured batch size, times per layer for one micro-batch,
measured on a 1A1F deployment:

- ``batch``: sequences one attention instance decodes in the micro-batch
  (on 1A1F, also the tokens the FFN instance receives);
- ``attention_s``: one layer's attention on the attention instance, seconds;
- ``ffn_s``: one layer's FFN on the FFN instance for those tokens, seconds;
- ``exchange_s``: one layer's exchange, dispatch and combine together, seconds;
- ``context`` (optional, in every row or none): mean KV tokens per sequence.

With ``context`` the attention fit is per KV token, ``t_A = a * batch * context
+ b`` (arXiv 2601.21351's t_A(T)); without it, per sequence, ``t_A = k1 *
batch + k2`` (MegaScale-Infer's form), valid at the context it was measured at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from afd_e2e.plan.rows import read_rows
from afd_e2e.plan.types import PlanInputError

REQUIRED = ("batch", "attention_s", "ffn_s", "exchange_s")
OPTIONAL = ("context",)


@dataclass(frozen=True)
class LinearFit:
    """``y = slope * x + intercept``, least squares."""

    slope: float
    intercept: float

    def __call__(self, x: float) -> float:
        return max(self.slope * x + self.intercept, 0.0)


@dataclass(frozen=True)
class StageFits:
    """Linear stage-time models, per layer and micro-batch, seconds."""

    attention: LinearFit
    attention_per_token: bool
    """True: x = batch x context (KV tokens); False: x = batch (sequences)."""
    ffn: LinearFit
    """x = tokens one FFN instance processes."""
    exchange: LinearFit
    """x = tokens one instance sends or receives; dispatch and combine together."""
    rows: int
    source: str

    def attention_time(self, batch: float, context: float) -> float:
        x = batch * context if self.attention_per_token else batch
        return self.attention(x)


def fit_linear(xs: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Ordinary least squares; needs at least two distinct ``xs``."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("needs at least two distinct x values")
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    return LinearFit(slope, mean_y - slope * mean_x)


def fit_stages(rows: Sequence[dict[str, float]], source: str) -> StageFits:
    """The three fits from measured rows; raises ``PlanInputError``."""
    problems = []
    with_context = sum(1 for row in rows if "context" in row)
    if 0 < with_context < len(rows):
        problems.append(
            f"{source}: 'context' is set in {with_context} of {len(rows)} rows; "
            "give it in every row or in none"
        )
    batches = [row.get("batch", 0.0) for row in rows]
    if len(set(batches)) < 2:
        problems.append(
            f"{source}: needs rows at two or more different 'batch' values to fit "
            f"a line, got {sorted(set(batches))}"
        )
    if problems:
        raise PlanInputError(problems)
    per_token = with_context == len(rows)
    xs_a = [
        row["batch"] * row["context"] if per_token else row["batch"] for row in rows
    ]
    if len(set(xs_a)) < 2:
        raise PlanInputError(
            f"{source}: batch x context takes one value in every row; vary it"
        )
    return StageFits(
        attention=fit_linear(xs_a, [row["attention_s"] for row in rows]),
        attention_per_token=per_token,
        ffn=fit_linear(batches, [row["ffn_s"] for row in rows]),
        exchange=fit_linear(batches, [row["exchange_s"] for row in rows]),
        rows=len(rows),
        source=source,
    )


def load_calibration(path: Path) -> StageFits:
    """Read and fit a calibration file (format in this module's docstring)."""
    if not path.is_file():
        raise PlanInputError(f"--calibration: no such file {str(path)!r}")
    rows = read_rows(path, REQUIRED, OPTIONAL)
    problems = [
        f"{path}: row {index + 1}: 'batch' must be at least 1, got {row['batch']:g}"
        for index, row in enumerate(rows)
        if row["batch"] < 1
    ]
    if problems:
        raise PlanInputError(problems)
    return fit_stages(rows, str(path))
