# SPDX-License-Identifier: Apache-2.0
"""What one GSM8K gate run is asked (Gsm8kRequest) and what it answers
(Gsm8kResult), and the completions URL a request's base URL names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


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
