"""GSM8K accuracy gate: run real lm-eval against the attention role's API.

``run_gsm8k(Gsm8kRequest) -> Gsm8kResult``, shared by ``afd-e2e gsm8k`` and
``afd-e2e run``. lm-eval runs in a child interpreter (gsm8k_lmeval.py) with the
Hugging Face hub switched off; this module resolves the request, streams the
child's progress to stderr and judges lm-eval's saved results (gsm8k_gate.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from afd_e2e.checks import gsm8k_lmeval as worker
from afd_e2e.checks.gsm8k_data import Gsm8kDataError, resolve_data
from afd_e2e.checks.gsm8k_gate import (
    Overrides,
    Refused,
    Verdict,
    dbo_floor_errors,
    env_overrides,
    judge,
    load_saved,
)

# Set in the lm-eval process: nothing may reach the Hugging Face hub.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TQDM_DISABLE": "1",
    "PYTHONUNBUFFERED": "1",
}
LOG_TAIL_LINES = 15
# Progress reaches the log every second, the console at most this often.
PROGRESS_PRINT_INTERVAL_S = 5.0
# The datasets library's conversion cache: per run, removed after it.
DATASETS_CACHE = "hf_datasets_cache"


@dataclass(frozen=True)
class Gsm8kRequest:
    """One GSM8K gate run against an OpenAI-compatible completions server."""

    base_url: str
    """Server root, ``.../v1`` or ``.../v1/completions`` of the attention API."""
    model: str
    """Served model name sent in each request (need not be a hub id)."""
    samples: int | None = None
    """Test items to evaluate, exactly; None means the whole test split."""
    threshold: float = 0.0
    """Minimum exact_match under the strict-match filter."""
    concurrency: int = 4
    """Requests in flight at once."""
    fewshot: int = 8
    """Few-shot examples per prompt, drawn from the train split."""
    data: Path | None = None
    """Local GSM8K copy; None reads AFD_GSM8K_DATA."""
    tokenizer: Path | None = None
    """Optional local tokenizer directory passed to lm-eval (needs transformers)."""
    out_dir: Path | None = None
    """Where lm-eval's results, samples and log go; None: runs/gsm8k-<time>."""
    dbo: bool = False
    """A DBO scenario: needs concurrency >= 12 and >= 24 samples."""
    max_gen_toks: int = 256
    """Upper bound on generated tokens per answer."""
    request_timeout_s: int = 600
    """lm-eval's per-request HTTP timeout."""
    timeout_s: float | None = None
    """Kill lm-eval and fail after this many seconds; None waits."""


@dataclass(frozen=True)
class Gsm8kResult:
    """The gate's outcome; ``message`` is the PASS/FAIL/REFUSED line."""

    passed: bool
    message: str
    threshold: float
    n: int = 0
    requested: int | None = None
    strict: float | None = None
    flexible: float | None = None
    refused: bool = False
    out_dir: Path | None = None
    results_path: Path | None = None
    samples_path: Path | None = None
    summary_path: Path | None = None
    log_path: Path | None = None
    notices: tuple[str, ...] = field(default_factory=tuple)


def completions_url(base_url: str) -> str:
    """``http://h:p``, ``http://h:p/v1`` or the full URL -> ``.../v1/completions``."""
    url = base_url.rstrip("/")
    if url.endswith("/v1/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/completions"
    return url + "/v1/completions"


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
        run = _run_worker(spec, out_dir, env, request.timeout_s, out)
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


@dataclass
class _WorkerRun:
    log_path: Path
    done: dict[str, object] = field(default_factory=dict)
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    printed_at: float | None = None


def _run_worker(
    spec: dict[str, object],
    out_dir: Path,
    environ: Mapping[str, str],
    timeout_s: float | None,
    out: TextIO,
) -> _WorkerRun:
    spec_path = out_dir / "gsm8k_spec.json"
    spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    run = _WorkerRun(log_path=out_dir / "lm_eval.log")
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    cmd = [sys.executable, "-m", worker.__name__, str(spec_path)]
    timed_out = threading.Event()
    with (
        run.log_path.open("w", encoding="utf-8") as log,
        subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=_child_env(environ, out_dir, str(spec["completions_url"])),
        ) as proc,
    ):
        timer = None
        if timeout_s is not None:
            timer = threading.Timer(timeout_s, lambda: (timed_out.set(), proc.kill()))
            timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                _handle_line(line.rstrip("\n"), run, tail, out)
            proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    run.tail = list(tail)
    if timed_out.is_set():
        run.error = f"lm-eval did not finish within {timeout_s:g} s (killed)"
    elif run.error is None and proc.returncode != 0:
        run.error = f"lm-eval exited with {proc.returncode} (log {run.log_path})"
    elif run.error is None and not run.done:
        run.error = f"lm-eval finished without results (log {run.log_path})"
    return run


def _handle_line(line: str, run: _WorkerRun, tail: deque[str], out: TextIO) -> None:
    head, _, rest = line.partition(" ")
    if head == worker.PROGRESS:
        done, total, elapsed = rest.split()
        now = time.monotonic()
        if (
            run.printed_at is not None
            and done != total
            and now - run.printed_at < PROGRESS_PRINT_INTERVAL_S
        ):
            return
        run.printed_at = now
        rate = int(done) / float(elapsed) if float(elapsed) > 0 else 0.0
        print(
            f"gsm8k: {done}/{total} requests done, {rate:.1f} req/s, "
            f"{float(elapsed):.1f} s",
            file=out,
            flush=True,
        )
    elif head == worker.DONE:
        run.done = json.loads(rest)
    elif head == worker.ERROR:
        run.error = f"lm-eval run failed: {rest} (log {run.log_path})"
    elif line.strip():
        tail.append(line)


def _child_env(environ: Mapping[str, str], out_dir: Path, url: str) -> dict[str, str]:
    env = dict(environ)
    env.update(OFFLINE_ENV)
    env["HF_DATASETS_CACHE"] = str(out_dir / DATASETS_CACHE)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, env.get("PYTHONPATH", "")) if p
    )
    host = urlsplit(url).hostname or ""
    for name in ("NO_PROXY", "no_proxy"):
        env[name] = ",".join(p for p in (env.get(name, ""), host) if p)
    return env


def _default_out_dir() -> Path:
    return Path("runs") / time.strftime("gsm8k-%Y%m%d-%H%M%S")


def _path(value: object) -> Path | None:
    return Path(value) if isinstance(value, str) else None
