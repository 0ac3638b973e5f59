# SPDX-License-Identifier: Apache-2.0
"""The workload a plan must serve: mean context (given, or a request trace's
theta) and the TPOT target.

A trace is a CSV (header ``prompt_tokens,decode_tokens``) or JSON (a list of
``{"prompt_tokens": ..., "decode_tokens": ...}``, or ``{"rows": [...]}``),
one row per request.
"""

from __future__ import annotations

from pathlib import Path

from afd_e2e.plan.provisioning import theta
from afd_e2e.plan.rows import read_rows
from afd_e2e.plan.types import PlanInputError, Workload

TRACE_COLUMNS = ("prompt_tokens", "decode_tokens")


def trace_theta(path: Path) -> tuple[float, int]:
    """theta (``provisioning.theta``) of a trace file and its request count."""
    if not path.is_file():
        raise PlanInputError(f"--trace: no such file {str(path)!r}")
    rows = read_rows(path, TRACE_COLUMNS)
    prompts = [row["prompt_tokens"] for row in rows]
    decodes = [row["decode_tokens"] for row in rows]
    if sum(decodes) <= 0:
        raise PlanInputError(f"{path}: every decode_tokens is 0; nothing decodes")
    return theta(prompts, decodes), len(rows)


def make_workload(
    tpot_ms: float, context: float | None = None, trace: Path | None = None
) -> Workload:
    """Exactly one of ``context`` and ``trace``; raises ``PlanInputError``."""
    problems = []
    if tpot_ms <= 0:
        problems.append(f"--tpot-ms must be positive, got {tpot_ms:g}")
    if (context is None) == (trace is None):
        problems.append("give exactly one of --context TOKENS and --trace FILE")
    elif context is not None and context <= 0:
        problems.append(f"--context must be positive, got {context:g}")
    if problems:
        raise PlanInputError(problems)
    if trace is not None:
        value, requests = trace_theta(trace)
        noun = "request" if requests == 1 else "requests"
        source = f"theta of {requests} {noun} in {trace} (renewal-reward)"
        return Workload(context=value, tpot_s=tpot_ms / 1000, source=source)
    assert context is not None
    return Workload(context=context, tpot_s=tpot_ms / 1000, source="--context")
