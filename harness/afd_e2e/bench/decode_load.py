# SPDX-License-Identifier: Apache-2.0
"""Steady decode load for ``afd-e2e bench --profile``: N streaming greedy
completions held open against one server (tokens counted per stream, ended by
closing their connections), and the server's own counters from ``/metrics``.

Straight to the server (no proxy), never retried: a failed stream is an error
of the measurement, reported as it came.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

STOP_JOIN_S = 10.0
"""How long a stream may take to notice the stop before its socket is shut."""

COUNTERS = {
    "generation_tokens": "vllm:generation_tokens_total",
    "steps": "vllm:iteration_tokens_total_count",
    "step_tokens": "vllm:iteration_tokens_total_sum",
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "preemptions": "vllm:num_preemptions_total",
}
"""What ``ServerCounters`` reads: vLLM's engine counters (one ``steps``
observation per engine step that produced outputs; ``step_tokens`` counts the
prompt tokens computed and the tokens generated in those steps)."""


@dataclass(frozen=True)
class ServerCounters:
    """One read of the counters, summed over engines, and when."""

    at: float
    """``time.monotonic()`` after the read."""
    values: dict[str, float]

    def delta(self, earlier: ServerCounters, name: str) -> float:
        return self.values[name] - earlier.values[name]


def parse_metrics(text: str) -> dict[str, float]:
    """``COUNTERS`` from Prometheus text, each summed over its label sets;
    raises ``ValueError`` naming a metric the server did not export."""
    wanted = {metric: name for name, metric in COUNTERS.items()}
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        metric = line.split("{", 1)[0].split(" ", 1)[0]
        name = wanted.get(metric)
        if name is not None:
            found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    missing = [COUNTERS[n] for n in COUNTERS if n not in found]
    if missing:
        raise ValueError(f"/metrics has no {', '.join(missing)}")
    return found


def read_counters(base_url: str, timeout_s: float = 10.0) -> ServerCounters:
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode(errors="replace")
        if response.status != 200:
            raise OSError(f"GET /metrics: HTTP {response.status}")
    finally:
        conn.close()
    return ServerCounters(time.monotonic(), parse_metrics(body))


def prompt_ids(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``count`` prompts of exactly ``length`` token ids (no tokenizer needed),
    different per stream so that no prefix is shared."""
    rng = random.Random(seed)
    low = min(8, vocab - 1)  # clear of the special tokens at the start
    return [[rng.randrange(low, vocab) for _ in range(length)] for _ in range(count)]


class _Stream(threading.Thread):
    """One streaming completion; ``tokens`` grows as they arrive."""

    def __init__(
        self, base_url: str, body: dict[str, object], stop: threading.Event
    ) -> None:
        super().__init__(daemon=True)
        url = urllib.parse.urlsplit(base_url)
        self._conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
        self._body = json.dumps(body).encode()
        self._stop_event = stop
        self.tokens = 0
        self.finish_reason: str | None = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._conn.request(
                "POST",
                "/v1/completions",
                body=self._body,
                headers={"Content-Type": "application/json"},
            )
            response = self._conn.getresponse()
            if response.status != 200:
                self.error = f"HTTP {response.status}: {response.read()[:300]!r}"
                return
            for raw in response:
                if self._stop_event.is_set():
                    return
                self._chunk(raw.strip())
                if self.finish_reason or self.error:
                    return
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if not self._stop_event.is_set():
                self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._conn.close()

    def _chunk(self, line: bytes) -> None:
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            return
        chunk = json.loads(line[len(b"data: ") :])
        if "error" in chunk:
            self.error = str(chunk["error"])
        for choice in chunk.get("choices", []):
            self.tokens += len(choice.get("token_ids") or ())
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def shut(self) -> None:
        """Unblock a read the stop event cannot reach (a stalled server)."""
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class DecodeLoad:
    """``len(prompts)`` streaming greedy completions of ``max_tokens`` each
    (``ignore_eos``), started together; :meth:`stop` closes them all, which
    vLLM takes as the clients going away and aborts the requests."""

    def __init__(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[list[int]],
        max_tokens: int,
    ) -> None:
        self._stop = threading.Event()
        self.streams = [
            _Stream(
                base_url,
                {
                    "model": model,
                    "prompt": list(prompt),
                    "max_tokens": max_tokens,
                    "temperature": 0.0,
                    "ignore_eos": True,
                    "stream": True,
                    "return_token_ids": True,
                },
                self._stop,
            )
            for prompt in prompts
        ]
        for stream in self.streams:
            stream.start()

    def tokens(self) -> list[int]:
        return [s.tokens for s in self.streams]

    def all_decoding(self) -> bool:
        """Every stream has its first token: every prefill is done."""
        return all(s.tokens > 0 for s in self.streams)

    def problems(self) -> list[str]:
        """Streams that failed or finished (the load is no longer steady)."""
        out = []
        for index, s in enumerate(self.streams):
            if s.error:
                out.append(f"stream {index}: {s.error}")
            elif s.finish_reason:
                out.append(
                    f"stream {index} finished ({s.finish_reason}) after {s.tokens} "
                    "tokens, before the window ended"
                )
        return out

    def stop(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + STOP_JOIN_S
        for stream in self.streams:
            stream.join(max(0.0, deadline - time.monotonic()))
        for stream in self.streams:
            if stream.is_alive():
                stream.shut()
                stream.join(STOP_JOIN_S)
