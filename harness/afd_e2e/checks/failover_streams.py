# SPDX-License-Identifier: Apache-2.0
"""The streaming clients of the FFN failover check: concurrent greedy
completions, each on its own thread, and what each has received so far.

The check reads the counts to land each kill mid-generation and the outcomes
to judge it; a client never retries (a retry would hide a failed request).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from afd_e2e.checks.completions import StreamOutcome, stream_completion


@dataclass(frozen=True)
class StreamEnd:
    """How one stream ended: its outcome or the error, and when."""

    outcome: StreamOutcome | None
    error: BaseException | None
    at: float
    """``time.monotonic()`` when the client saw the end."""

    @property
    def completed(self) -> bool:
        """Every asked token arrived: the server ended it for length."""
        return self.error is None and (
            self.outcome is not None and self.outcome.finish_reason == "length"
        )

    def describe(self) -> str:
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        assert self.outcome is not None
        return (
            f"ended with finish_reason {self.outcome.finish_reason!r} after "
            f"{len(self.outcome.token_ids)} ids"
        )


class Streams:
    """``len(prompts)`` streaming greedy completions (temperature 0,
    ``ignore_eos``, token ids returned), started together."""

    def __init__(
        self,
        base_url: str,
        model: str,
        prompts: Sequence[str],
        max_tokens: int,
        timeout_s: float,
    ) -> None:
        self.prompts = list(prompts)
        self._body = {
            "model": model,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._received = [0] * len(self.prompts)
        self._arrivals: list[list[float]] = [[] for _ in self.prompts]
        self._ends: dict[int, StreamEnd] = {}
        self._threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True)
            for i in range(len(self.prompts))
        ]

    def _client(self, i: int) -> None:
        def seen(count: int) -> None:
            now = time.monotonic()
            with self._lock:
                self._arrivals[i] += [now] * (count - self._received[i])
                self._received[i] = count

        outcome: StreamOutcome | None = None
        error: BaseException | None = None
        try:
            outcome = stream_completion(
                self._base_url,
                {**self._body, "prompt": self.prompts[i]},
                self._timeout_s,
                on_tokens=seen,
            )
        except BaseException as exc:  # noqa: BLE001 - judged by the check
            error = exc
        with self._lock:
            self._ends[i] = StreamEnd(outcome, error, time.monotonic())

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def received(self) -> list[int]:
        """Token ids each stream has received so far."""
        with self._lock:
            return list(self._received)

    def arrivals(self) -> list[list[float]]:
        """When each stream's token ids arrived (``time.monotonic()``, one
        entry per id; ids of one chunk share its time)."""
        with self._lock:
            return [list(a) for a in self._arrivals]

    def ends(self) -> dict[int, StreamEnd]:
        """The streams that ended so far, by index."""
        with self._lock:
            return dict(self._ends)

    def wait_until(
        self, ready: Callable[[list[int]], bool], timeout_s: float, poll_s: float
    ) -> bool:
        """Poll until ``ready(received)`` or a stream ended (False then) or
        ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ends():
                return False
            if ready(self.received()):
                return True
            time.sleep(poll_s)
        return False

    def join(self, timeout_s: float) -> bool:
        """Wait until every stream ended; False past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return len(self.ends()) == len(self.prompts)
