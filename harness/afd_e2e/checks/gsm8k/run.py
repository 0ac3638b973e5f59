# SPDX-License-Identifier: Apache-2.0
"""``run_gsm8k``: resolve a request, run lm-eval once in its child (worker.py)
and judge what it saved (gate.py); writes the gate summary beside the results."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from importlib.util import find_spec
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from afd_e2e.checks.gsm8k.data import Gsm8kDataError, resolve_data
from afd_e2e.checks.gsm8k.gate import (
    Overrides,
    Refused,
    Verdict,
    dbo_floor_errors,
    env_overrides,
    judge,
    load_saved,
)
from afd_e2e.checks.gsm8k.request import Gsm8kRequest, Gsm8kResult, completions_url
from afd_e2e.checks.gsm8k.worker import DATASETS_CACHE, run_worker


def run_gsm8k(
    request: Gsm8kRequest,
    environ: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
) -> Gsm8kResult:
    """Run the gate; progress and notices go to ``stream`` (stderr)."""
    env = dict(os.environ if environ is None else environ)
    out = stream or sys.stderr
    threshold = request.threshold
    overrides = Overrides(None, None, ())
    try:
        errors = _request_errors(request)
        try:
            overrides = env_overrides(env, request.samples, request.threshold)
        except Refused as exc:
            errors.insert(0, str(exc))
        if errors:
            raise Refused("; ".join(errors))
        for notice in overrides.notices:
            print(notice, file=out, flush=True)
        if overrides.threshold is not None:
            threshold = overrides.threshold
        data = resolve_data(request.data, env)
        samples = overrides.limit or request.samples or data.test_rows
        if request.dbo and (errors := dbo_floor_errors(request.concurrency, samples)):
            raise Refused("; ".join(errors))
    except (Refused, Gsm8kDataError) as exc:
        return Gsm8kResult(False, f"REFUSED gsm8k: {exc}", threshold, refused=True)

    out_dir = (request.out_dir or _default_out_dir()).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "completions_url": completions_url(request.base_url),
        "model": request.model,
        "limit": samples,
        "fewshot": request.fewshot,
        "concurrency": request.concurrency,
        "max_gen_toks": request.max_gen_toks,
        "request_timeout_s": request.request_timeout_s,
        "tokenizer": str(request.tokenizer.resolve()) if request.tokenizer else None,
        "data": {
            "format": data.format,
            "test": str(data.test),
            "train": str(data.train),
        },
        "out_dir": str(out_dir),
    }
    print(
        f"gsm8k: {samples} samples, {request.fewshot}-shot, concurrency "
        f"{request.concurrency} against {spec['completions_url']} "
        f"(model {request.model}); output in {out_dir}",
        file=out,
        flush=True,
    )
    try:
        run = run_worker(spec, out_dir, env, request.timeout_s, out)
    finally:
        shutil.rmtree(out_dir / DATASETS_CACHE, ignore_errors=True)
    results_path = _path(run.done.get("results_path"))
    samples_path = _path(run.done.get("samples_path"))
    if run.error is not None:
        verdict = Verdict(False, f"FAIL gsm8k: {run.error}", None, None, 0)
    else:
        verdict = judge(*load_saved(results_path, samples_path), samples, threshold)
    if not verdict.passed and run.tail:
        print(f"gsm8k: last lines of {run.log_path}:", file=out)
        print("  " + "\n  ".join(run.tail), file=out, flush=True)
    result = Gsm8kResult(
        passed=verdict.passed,
        message=verdict.message,
        threshold=threshold,
        n=verdict.n,
        requested=samples,
        strict=verdict.strict,
        flexible=verdict.flexible,
        out_dir=out_dir,
        results_path=results_path,
        samples_path=samples_path,
        summary_path=out_dir / "gsm8k_gate.json",
        log_path=run.log_path,
        notices=overrides.notices,
    )
    summary = {
        k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()
    }
    result.summary_path.write_text(
        json.dumps(summary, indent=2) + "\n", encoding="utf-8"
    )
    return result


def _request_errors(request: Gsm8kRequest) -> list[str]:
    errors = []
    if urlsplit(request.base_url).scheme not in ("http", "https"):
        errors.append(f"base_url must be an http(s) URL, got {request.base_url!r}")
    if not request.model:
        errors.append("model must be a non-empty served model name")
    if request.samples is not None and request.samples < 1:
        errors.append(f"samples must be >= 1, got {request.samples}")
    if not 0.0 <= request.threshold <= 1.0:
        errors.append(f"threshold must be in [0, 1], got {request.threshold}")
    for name in ("concurrency", "max_gen_toks", "request_timeout_s"):
        if getattr(request, name) < 1:
            errors.append(f"{name} must be >= 1, got {getattr(request, name)}")
    if request.fewshot < 0:
        errors.append(f"fewshot must be >= 0, got {request.fewshot}")
    if request.tokenizer is not None and not request.tokenizer.is_dir():
        errors.append(f"tokenizer {request.tokenizer} is not a local directory")
    if request.tokenizer is not None and find_spec("transformers") is None:
        errors.append("a tokenizer needs the transformers package installed")
    if find_spec("lm_eval") is None:
        errors.append("lm-eval is not installed: pip install -e '.[eval]'")
    return errors


def _default_out_dir() -> Path:
    return Path("runs") / time.strftime("gsm8k-%Y%m%d-%H%M%S")


def _path(value: object) -> Path | None:
    return Path(value) if isinstance(value, str) else None
