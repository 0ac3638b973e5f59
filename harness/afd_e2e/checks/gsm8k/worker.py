# SPDX-License-Identifier: Apache-2.0
"""Runs the lm-eval child (lmeval.py) in an offline interpreter: writes its spec,
streams its protocol lines to the console and log, and kills it on timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

import afd_e2e
from afd_e2e.checks.gsm8k.protocol import CHILD_MODULE, DONE, ERROR, PROGRESS

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


@dataclass
class WorkerRun:
    """What one lm-eval child left: its DONE payload or the error, a log tail."""

    log_path: Path
    done: dict[str, object] = field(default_factory=dict)
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    printed_at: float | None = None


def run_worker(
    spec: dict[str, object],
    out_dir: Path,
    environ: Mapping[str, str],
    timeout_s: float | None,
    out: TextIO,
) -> WorkerRun:
    """Start the child on ``spec`` and wait for it (at most ``timeout_s``)."""
    spec_path = out_dir / "gsm8k_spec.json"
    spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    run = WorkerRun(log_path=out_dir / "lm_eval.log")
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    cmd = [sys.executable, "-m", CHILD_MODULE, str(spec_path)]
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


def _handle_line(line: str, run: WorkerRun, tail: deque[str], out: TextIO) -> None:
    head, _, rest = line.partition(" ")
    if head == PROGRESS:
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
    elif head == DONE:
        run.done = json.loads(rest)
    elif head == ERROR:
        run.error = f"lm-eval run failed: {rest} (log {run.log_path})"
    elif line.strip():
        tail.append(line)


def _child_env(environ: Mapping[str, str], out_dir: Path, url: str) -> dict[str, str]:
    env = dict(environ)
    env.update(OFFLINE_ENV)
    env["HF_DATASETS_CACHE"] = str(out_dir / DATASETS_CACHE)
    # The directory that holds the afd_e2e package, so the child imports it.
    package_root = str(Path(afd_e2e.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, env.get("PYTHONPATH", "")) if p
    )
    host = urlsplit(url).hostname or ""
    for name in ("NO_PROXY", "no_proxy"):
        env[name] = ",".join(p for p in (env.get(name, ""), host) if p)
    return env
