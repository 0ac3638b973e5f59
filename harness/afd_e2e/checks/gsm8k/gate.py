# SPDX-License-Identifier: Apache-2.0
"""The GSM8K gate's rules: environment overrides, CI refusals, DBO floors, verdict.

Pure functions over plain values; run.py wires them to the lm-eval run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from afd_e2e.define.policy import (
    DBO_MIN_CONCURRENCY,
    DBO_MIN_SAMPLES,
    GSM8K_LIMIT_ENV,
    GSM8K_THRESHOLD_ENV,
    is_ci,
)

STRICT = "exact_match,strict-match"
FLEXIBLE = "exact_match,flexible-extract"


class Refused(Exception):
    """The run must not start; the message names every reason."""


@dataclass(frozen=True)
class Overrides:
    """What the environment changed, and the loud notices saying so."""

    limit: int | None
    threshold: float | None
    notices: tuple[str, ...]


def env_overrides(
    environ: Mapping[str, str], samples: int | None, threshold: float
) -> Overrides:
    """Apply AFD_GSM8K_LIMIT / AFD_GSM8K_THRESHOLD under the CI rules of AFD-I12.

    In CI the limit is refused and a threshold below the requested one is
    refused; outside CI both override and are reported.
    """
    ci = is_ci(environ)
    errors: list[str] = []
    notices: list[str] = []
    limit: int | None = None
    new_threshold: float | None = None
    raw_limit = environ.get(GSM8K_LIMIT_ENV, "")
    raw_threshold = environ.get(GSM8K_THRESHOLD_ENV, "")
    if raw_limit:
        if ci:
            errors.append(
                f"{GSM8K_LIMIT_ENV}={raw_limit} is set in CI (CI or BUILDKITE); a "
                "gate must evaluate its full sample count: unset it"
            )
        else:
            try:
                limit = int(raw_limit)
            except ValueError:
                limit = 0
            if limit < 1:
                errors.append(
                    f"{GSM8K_LIMIT_ENV} must be an integer >= 1, got {raw_limit!r}"
                )
            else:
                notices.append(
                    f"WARNING: {GSM8K_LIMIT_ENV}={limit} overrides the sample count "
                    f"(requested {samples if samples is not None else 'all'}); "
                    "not a gate result"
                )
    if raw_threshold:
        value = _float_or_nan(raw_threshold)
        if not 0.0 <= value <= 1.0:
            errors.append(
                f"{GSM8K_THRESHOLD_ENV} must be a number in [0, 1], "
                f"got {raw_threshold!r}"
            )
        elif ci and value < threshold:
            errors.append(
                f"{GSM8K_THRESHOLD_ENV}={raw_threshold} lowers the threshold "
                f"{threshold:g} in CI (CI or BUILDKITE); a gate may not lower it"
            )
        else:
            new_threshold = value
            notices.append(
                f"WARNING: {GSM8K_THRESHOLD_ENV}={value:g} overrides the threshold "
                f"(requested {threshold:g})"
                + ("" if value >= threshold else "; not a gate result")
            )
    if errors:
        raise Refused("; ".join(errors))
    return Overrides(limit, new_threshold, tuple(notices))


def dbo_floor_errors(concurrency: int, samples: int) -> list[str]:
    """Why a DBO scenario's GSM8K run is too small to exercise two micro-batches."""
    errors = []
    if concurrency < DBO_MIN_CONCURRENCY:
        errors.append(
            f"a DBO run needs concurrency >= {DBO_MIN_CONCURRENCY}, got {concurrency}"
        )
    if samples < DBO_MIN_SAMPLES:
        errors.append(f"a DBO run needs >= {DBO_MIN_SAMPLES} samples, got {samples}")
    return errors


@dataclass(frozen=True)
class Verdict:
    """The gate's decision over lm-eval's saved results."""

    passed: bool
    message: str
    strict: float | None
    flexible: float | None
    n: int


def format_pair(value: float, threshold: float) -> tuple[str, str]:
    """Both numbers as printed: 4 decimals, more when needed to show the order."""
    for digits in range(4, 17):
        shown = _shown(value, digits), _shown(threshold, digits)
        if (float(shown[0]) >= float(shown[1])) == (value >= threshold) and (
            value == threshold or shown[0] != shown[1]
        ):
            return shown
    return repr(value), repr(threshold)


def judge(
    results: Mapping[str, object] | None,
    sample_docs: int | None,
    requested: int,
    threshold: float,
    task: str = "gsm8k",
) -> Verdict:
    """PASS only with the exact sample count and finite metrics above threshold.

    ``results`` is lm-eval's saved results JSON; ``sample_docs`` the number of
    distinct documents in its per-sample file.
    """
    if results is None:
        return Verdict(False, "FAIL gsm8k: lm-eval saved no results", None, None, 0)
    task_results = _mapping(_mapping(results.get("results")).get(task))
    counts = _mapping(_mapping(results.get("n-samples")).get(task))
    effective = counts.get("effective")
    n = effective if isinstance(effective, int) else 0
    strict = _metric(task_results.get(STRICT))
    flexible = _metric(task_results.get(FLEXIBLE))
    if effective != requested or sample_docs != requested:
        return Verdict(
            False,
            f"FAIL gsm8k: sample count mismatch: requested {requested}, lm-eval "
            f"evaluated {effective} (test split {counts.get('original')}), "
            f"per-sample file holds {sample_docs}",
            strict,
            flexible,
            n,
        )
    bad = [
        f"{name} is {_describe(task_results.get(name))}"
        for name, value in ((STRICT, strict), (FLEXIBLE, flexible))
        if value is None
    ]
    if bad:
        return Verdict(False, "FAIL gsm8k: " + "; ".join(bad), strict, flexible, n)
    assert strict is not None
    shown, limit = format_pair(strict, threshold)
    passed = strict >= threshold
    line = (
        f"{'PASS' if passed else 'FAIL'} gsm8k {STRICT} {shown} "
        f"{'>=' if passed else '<'} {limit} (n={n})"
    )
    return Verdict(passed, line, strict, flexible, n)


def load_saved(
    results_path: Path | None, samples_path: Path | None, task: str = "gsm8k"
) -> tuple[dict[str, object] | None, int | None]:
    """lm-eval's saved results and the number of distinct documents it logged."""
    results = None
    if results_path is not None and results_path.is_file():
        results = json.loads(results_path.read_text(encoding="utf-8"))
    docs = None
    if samples_path is not None and samples_path.is_file():
        seen = set()
        with samples_path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    seen.add(json.loads(line).get("doc_id"))
        docs = len(seen)
    return results, docs


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _metric(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _describe(value: object) -> str:
    return "missing" if value is None else f"not a finite number ({value!r})"


def _float_or_nan(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        return math.nan


def _shown(value: float, digits: int) -> str:
    text = f"{value:.{digits}f}"
    while text.endswith("0") and len(text.split(".")[1]) > 2:
        text = text[:-1]
    return text
