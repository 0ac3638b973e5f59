# SPDX-License-Identifier: Apache-2.0
"""A client streaming long greedy completions from a vLLM server in a
thread, for tests that break a deployment mid-generation: it returns once the
first tokens have arrived, and says what the user saw when the stream ended.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from collections.abc import Sequence

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.processes.servers import VllmServer

MAX_TOKENS = 400
FIRST_TOKENS_S = 120.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def completion_body(server: VllmServer, prompts: Sequence[str]) -> dict[str, object]:
    return {
        "model": server.model,
        "prompt": list(prompts),
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
    }


class StreamingClient:
    """A client streaming long greedy completions of ``PROMPTS`` in a thread.

    ``error`` is what the user sees when the generation fails (a transport
    error, an error event, a stream that ended short); ``ended`` is when the
    client saw the stream end (``time.monotonic()``).
    """

    def __init__(self, server: VllmServer) -> None:
        self.finished: dict[int, str] = {}
        self.error: object | None = None
        self.ended: float | None = None
        self.streaming = threading.Event()
        self._request = urllib.request.Request(
            server.url("/v1/completions"),
            data=json.dumps(completion_body(server, PROMPTS)).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.streaming.wait(FIRST_TOKENS_S), "no token streamed"
        assert self.error is None and not self.finished, (self.error, self.finished)

    def _run(self) -> None:
        try:
            with _OPENER.open(self._request, timeout=600) as response:
                for raw in response:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line.removeprefix("data: "))
                    if "error" in chunk:
                        self.error = chunk["error"]
                    for choice in chunk.get("choices", []):
                        self.streaming.set()
                        if choice.get("finish_reason"):
                            self.finished[choice["index"]] = choice["finish_reason"]
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self.error = exc
        finally:
            self.ended = time.monotonic()
            self.streaming.set()
        complete = len(self.finished) == len(PROMPTS) and all(
            reason == "length" for reason in self.finished.values()
        )
        if not complete and self.error is None:
            self.error = f"the stream ended with {self.finished}"

    def join(self, timeout_s: float) -> bool:
        """Wait for the stream to end; whether it did."""
        self.thread.join(timeout_s)
        return not self.thread.is_alive()
