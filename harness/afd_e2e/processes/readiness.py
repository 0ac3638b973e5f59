# SPDX-License-Identifier: Apache-2.0
"""Readiness probes: is a role server serving yet? One call is one attempt.

Stdlib only (urllib, no proxies, no retries). :func:`poll_until_ready` is the
one polling loop both engines (local processes, Ray actors) wait in.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeResult:
    """The outcome of one probe attempt."""

    ready: bool
    detail: str
    """What the attempt saw, e.g. ``GET /health: HTTP 503``; shown in progress."""


Probe = Callable[[], ProbeResult]
"""A readiness probe: one attempt per call, never retries, never raises."""


def poll_until_ready(
    probes: Mapping[str, Probe | None],
    *,
    timeout_s: float,
    poll_s: float,
    check_alive: Callable[[], None],
    on_ready: Callable[[str], None],
    not_ready: Callable[[Mapping[str, object], Mapping[str, str], float], Exception],
    progress: Callable[[Mapping[str, object], Mapping[str, str], float], None]
    | None = None,
    progress_every_s: float | None = None,
) -> None:
    """Probe every role in ``probes`` until each is ready.

    A ``None`` probe is ready at once (alive is enough). ``check_alive`` runs
    before each round and once more after the last role turned ready, so a
    server that died just after its probe passed is never reported ready; it
    raises for a dead role. Each role's first ready probe calls ``on_ready``.
    Past ``timeout_s`` the exception ``not_ready(pending, seen, waited)`` is
    raised; every ``progress_every_s`` (when given) ``progress`` is called
    with the same arguments.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    every = progress_every_s or 0.0
    report = progress if every > 0 else None
    next_progress = start + every
    pending = dict(probes)
    seen: dict[str, str] = {}
    while True:
        check_alive()
        for name in list(pending):
            probe = pending[name]
            result = probe() if probe else ProbeResult(True, "alive (no probe)")
            seen[name] = result.detail
            if result.ready:
                on_ready(name)
                del pending[name]
        now = time.monotonic()
        if not pending:
            check_alive()
            return
        if now >= deadline:
            raise not_ready(pending, seen, now - start)
        if report is not None and now >= next_progress:
            next_progress = now + every
            report(pending, seen, now - start)
        time.sleep(max(0.0, min(poll_s, deadline - now)))


# Requests go straight to the role servers, never through an environment proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _request(
    url: str, timeout_s: float, body: dict[str, object] | None = None
) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, OSError):
        exc = exc.reason
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


def probe_health(base_url: str, *, timeout_s: float = 2.0) -> ProbeResult:
    """One ``GET {base_url}/health``; ready on HTTP 200."""
    try:
        status, _ = _request(f"{base_url}/health", timeout_s)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return ProbeResult(False, f"GET /health: {_error_text(exc)}")
    return ProbeResult(status == 200, f"GET /health: HTTP {status}")


PROBE_PROMPT = (
    "The attention and FFN servers of this deployment answer one greedy token "
    "to show that they are ready."
)
"""A sentence, not a word: vLLM 0.32's CPU attention on AMX (bf16) dies with
an illegal instruction on prompts of a few tokens ("Hi", "Hello" with the
tiny models' tokenizer); a probe must not be what kills a server."""


def probe_completion(
    base_url: str, model: str, *, timeout_s: float = 30.0
) -> ProbeResult:
    """One greedy 1-token ``POST /v1/completions``; ready on 200 with choices."""
    body: dict[str, object] = {
        "model": model,
        "prompt": PROBE_PROMPT,
        "max_tokens": 1,
        "temperature": 0,
    }
    where = "POST /v1/completions"
    try:
        status, raw = _request(f"{base_url}/v1/completions", timeout_s, body)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return ProbeResult(False, f"{where}: {_error_text(exc)}")
    if status != 200:
        return ProbeResult(False, f"{where}: HTTP {status}")
    try:
        choices = json.loads(raw).get("choices")
    except (ValueError, AttributeError):
        return ProbeResult(False, f"{where}: HTTP 200 but the body is not JSON")
    if not isinstance(choices, list) or not choices:
        return ProbeResult(False, f"{where}: HTTP 200 but no choices")
    return ProbeResult(True, f"{where}: HTTP 200, {len(choices)} choice(s)")


def attention_api_probe(
    base_url: str,
    model: str,
    *,
    health_timeout_s: float = 2.0,
    completion_timeout_s: float = 30.0,
) -> Probe:
    """Ready when ``/health`` is 200 AND one 1-token completion returns choices."""

    def probe() -> ProbeResult:
        health = probe_health(base_url, timeout_s=health_timeout_s)
        if not health.ready:
            return health
        return probe_completion(base_url, model, timeout_s=completion_timeout_s)

    return probe


def health_probe(base_url: str, *, timeout_s: float = 2.0) -> Probe:
    """Ready when ``GET /health`` is 200 (for servers users never talk to)."""
    return lambda: probe_health(base_url, timeout_s=timeout_s)


def tcp_probe(host: str, port: int, *, timeout_s: float = 1.0) -> Probe:
    """Ready when a TCP connection to ``host:port`` is accepted."""

    def probe() -> ProbeResult:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return ProbeResult(True, f"tcp {host}:{port}: accepted")
        except OSError as exc:
            return ProbeResult(False, f"tcp {host}:{port}: {_error_text(exc)}")

    return probe
