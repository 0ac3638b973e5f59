# SPDX-License-Identifier: Apache-2.0
"""Where a role's step time goes: named parts that tile each role's timeline,
averaged over a window of steps and logged as one line (``AFD_STEP_TIMING``).

Pure (no torch, no vLLM). The parts are timed when ``AFD_STEP_TIMING`` names a
window or a ``sink`` takes every step's parts (the role's Prometheus metrics,
``afd_plugin.metrics``); the role code brackets its parts with
``clock.part(name)`` and the window's line reads, per step in ms, e.g. on the
attention role::

    AFD_STEP_TIMING role=attention steps=200 step_ms=6.10 announce=0.20 ...

The attention parts tile the interval from one step's start to the next:
``between`` (vLLM's engine loop: scheduling, output processing; a gap of
``IDLE_GAP_S`` or more is the engine idle and left out), ``runner``
(vLLM's model runner outside the model: inputs, sampling), ``announce`` (the
control payloads), ``send`` and ``wait`` (the exchanges: handing a layer's
input over, waiting for its output), ``compute`` (the rest of the model call:
attention, norms, embedding, micro-batch hand-offs). The FFN parts tile the
daemon's loop: ``control`` (waiting for the next step's payloads), ``recv``
(waiting for a layer's input), ``compute``, ``send``.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from afd_plugin import envs

logger = logging.getLogger("afd_plugin")

TAG = "AFD_STEP_TIMING"
ATTENTION_PARTS = ("between", "runner", "announce", "send", "wait", "compute")
IDLE_GAP_S = 1.0
"""A gap between two attention steps this long is the engine idle (no
request), not step time: ``between`` leaves it out."""
FFN_PARTS = ("control", "recv", "compute", "send")
PARTS = {"attention": ATTENTION_PARTS, "ffn": FFN_PARTS}
"""The parts each role's step is split into."""
_OFF = nullcontext()


class StepClock:
    """Accumulates part durations; ``step()`` closes a step and logs the
    window's per-step means every ``window`` steps."""

    def __init__(
        self,
        role: str,
        window: int,
        derive: Callable[[dict[str, float]], dict[str, float]] | None = None,
    ) -> None:
        self.role = role
        self.window = window
        self.derive = derive
        """Turns the accumulated spans into the logged parts (e.g. a part
        that is a span minus the spans inside it)."""
        self.totals: dict[str, float] = defaultdict(float)
        """The spans of the step now running."""
        self.window_totals: dict[str, float] = defaultdict(float)
        self.steps = 0
        self.sink: Callable[[dict[str, float]], None] | None = None
        """Takes each finished step's parts (derived, in seconds)."""
        self._window_started: float | None = None

    @property
    def enabled(self) -> bool:
        return self.window > 0 or self.sink is not None

    def add(self, part: str, seconds: float) -> None:
        self.totals[part] += seconds

    def part(self, name: str) -> AbstractContextManager[None]:
        """Time the block as part ``name``; off, one shared no-op (the
        exchange calls this per layer)."""
        return self._timed(name) if self.enabled else _OFF

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] += time.perf_counter() - started

    def step(self, now: float | None = None) -> str | None:
        """Mark a step boundary: the step that ends goes to the sink; every
        ``window`` steps return (and log) the window's line and start a new
        window. Spans before the first boundary belong to no step."""
        if not self.enabled:
            return None
        now = time.perf_counter() if now is None else now
        spans = dict(self.totals)
        self.totals.clear()
        if self._window_started is None:
            self._window_started = now
            return None
        parts = self.derive(spans) if self.derive is not None else spans
        if self.sink is not None:
            self.sink(parts)
        if self.window <= 0:
            return None
        for name, seconds in parts.items():
            self.window_totals[name] += seconds
        self.steps += 1
        if self.steps < self.window:
            return None
        line = format_line(
            self.role, self.steps, now - self._window_started, self.window_totals
        )
        logger.info("%s", line)
        self._window_started, self.steps = now, 0
        self.window_totals.clear()
        return line


def format_line(
    role: str, steps: int, elapsed_s: float, parts: dict[str, float]
) -> str:
    per_step = {k: v * 1e3 / steps for k, v in parts.items()}
    shown = " ".join(f"{k}={per_step[k]:.3f}" for k in sorted(per_step))
    return (
        f"{TAG} role={role} steps={steps} step_ms={elapsed_s * 1e3 / steps:.3f} {shown}"
    )


def parse_line(line: str) -> dict[str, float | str] | None:
    """The fields of an ``AFD_STEP_TIMING`` line (``role``, ``steps``,
    ``step_ms`` and the parts), or None."""
    if TAG not in line:
        return None
    out: dict[str, float | str] = {}
    for token in line.split(TAG, 1)[1].split():
        key, sep, value = token.partition("=")
        if not sep:
            return None
        out[key] = value if key == "role" else float(value)
    return out if "step_ms" in out and "role" in out else None


def _attention_parts(spans: dict[str, float]) -> dict[str, float]:
    """``model`` (the model call) holds announce, send, wait and the compute;
    ``runner_total`` (execute_model and sample_tokens) holds the model call."""
    model = spans.get("model", 0.0)
    inside = sum(spans.get(k, 0.0) for k in ("announce", "send", "wait"))
    return {
        "between": spans.get("between", 0.0),
        "runner": spans.get("runner_total", 0.0) - model,
        "announce": spans.get("announce", 0.0),
        "send": spans.get("send", 0.0),
        "wait": spans.get("wait", 0.0),
        "compute": model - inside,
    }


_DERIVE = {"attention": _attention_parts}
_clocks: dict[str, StepClock] = {}


def clock(role: str) -> StepClock:
    """This process's clock for ``role`` (one per role, window from the env)."""
    if role not in _clocks:
        _clocks[role] = StepClock(role, envs.get("AFD_STEP_TIMING"), _DERIVE.get(role))
    return _clocks[role]


FFN_BUSY_PARTS = ("compute", "send")
"""The FFN role's parts that are work; ``control`` and ``recv`` wait for the
attention side."""


def overlap(attention: dict[str, float], ffn: dict[str, float]) -> dict[str, float]:
    """How well the two roles overlap, from both roles' per-step means in ms
    (``step_ms`` and the parts, as the timing lines give them):

    - ``attention_busy_ms``: the attention step less its ``wait`` for the FFN;
    - ``attention_wait_ms``: that wait (with two micro-batches, only while
      neither micro-batch can run);
    - ``ffn_busy_ms``: the FFN role's ``compute`` and ``send`` per step (one
      FFN step serves one step of every attention rank of its block);
    - ``pipeline_efficiency``: ``max(attention busy, FFN busy) / step``: 1
      when the busier role never waits, the figure two micro-batches raise.
    """
    step = attention["step_ms"]
    if step <= 0:
        raise ValueError(f"the attention step must take time, got {step} ms")
    wait = attention.get("wait", 0.0)
    busy = step - wait
    ffn_busy = sum(ffn.get(p, 0.0) for p in FFN_BUSY_PARTS)
    return {
        "step_ms": step,
        "attention_busy_ms": busy,
        "attention_wait_ms": wait,
        "ffn_busy_ms": ffn_busy,
        "pipeline_efficiency": max(busy, ffn_busy) / step,
    }
