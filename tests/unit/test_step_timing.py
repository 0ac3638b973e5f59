# SPDX-License-Identifier: Apache-2.0
"""AFD_STEP_TIMING: parts accumulate per window of steps, the logged line
reads back, and the attention parts tile the step (nothing counted twice)."""

from __future__ import annotations

import logging

import pytest

from afd_plugin import envs, step_timing
from afd_plugin.step_timing import (
    ATTENTION_PARTS,
    StepClock,
    _attention_parts,
    format_line,
    parse_line,
)


def test_a_window_logs_per_step_means_and_starts_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = StepClock("ffn", window=2)
    assert clock.step(now=10.0) is None  # the first boundary opens the window
    clock.add("recv", 0.002)
    assert clock.step(now=10.004) is None
    clock.add("recv", 0.004)
    clock.add("compute", 0.001)
    with caplog.at_level(logging.INFO, logger="afd_plugin"):
        line = clock.step(now=10.010)
    assert line is not None and line in caplog.text
    fields = parse_line(f"INFO 12-03 [x.py:1] {line}")
    assert fields == {
        "role": "ffn",
        "steps": 2.0,
        "step_ms": 5.0,
        "compute": 0.5,
        "recv": 3.0,
    }
    # The next window starts empty.
    clock.add("send", 0.001)
    assert clock.step(now=10.011) is None
    line = clock.step(now=10.013)
    assert parse_line(line or "") == {
        "role": "ffn",
        "steps": 2.0,
        "step_ms": 1.5,
        "send": 0.5,
    }


def test_attention_parts_tile_the_step() -> None:
    spans = {
        "between": 0.3,
        "runner_total": 5.0,  # execute_model + sample_tokens
        "model": 4.0,  # the model call inside them
        "announce": 0.2,
        "send": 0.3,
        "wait": 1.5,
    }
    parts = _attention_parts(spans)
    assert tuple(parts) == ATTENTION_PARTS
    assert parts["runner"] == pytest.approx(1.0)
    assert parts["compute"] == pytest.approx(2.0)
    # Every span is counted once: the parts add up to between + runner_total.
    assert sum(parts.values()) == pytest.approx(5.3)


def test_off_by_default_and_free_when_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AFD_STEP_TIMING", raising=False)
    assert envs.get("AFD_STEP_TIMING") == 0
    clock = StepClock("attention", window=0)
    with clock.part("send"):
        pass
    assert clock.step() is None and dict(clock.totals) == {}
    monkeypatch.setenv("AFD_STEP_TIMING", "-1")
    with pytest.raises(ValueError, match="AFD_STEP_TIMING"):
        envs.get("AFD_STEP_TIMING")


def test_lines_without_the_tag_or_malformed_read_as_none() -> None:
    assert parse_line("INFO something else") is None
    assert parse_line("AFD_STEP_TIMING role=ffn steps") is None
    line = format_line("attention", 4, 0.02, {"wait": 0.004})
    assert parse_line(line) == {
        "role": "attention",
        "steps": 4.0,
        "step_ms": 5.0,
        "wait": 1.0,
    }


def test_a_sink_gets_every_step_and_turns_the_timing_on() -> None:
    clock = StepClock("attention", window=0, derive=_attention_parts)
    assert not clock.enabled
    seen: list[dict[str, float]] = []
    clock.sink = seen.append
    assert clock.enabled
    clock.add("between", 9.0)  # before the first boundary: no step's
    assert clock.step(now=1.0) is None and seen == []
    with clock.part("send"):
        pass
    clock.add("model", 0.004)
    clock.add("runner_total", 0.005)
    assert clock.step(now=1.01) is None  # no window: nothing logged
    (parts,) = seen
    assert tuple(parts) == ATTENTION_PARTS
    assert parts["runner"] == pytest.approx(0.001)
    assert parts["between"] == 0.0 and parts["send"] > 0
    # The next step starts empty.
    assert clock.step(now=1.02) is None
    assert sum(seen[1].values()) == 0.0


def test_overlap_of_the_two_roles() -> None:
    attention = {"step_ms": 10.0, "wait": 4.0, "compute": 3.0, "send": 1.0}
    ffn = {"step_ms": 10.0, "control": 2.0, "recv": 3.0, "compute": 4.5, "send": 0.5}
    got = step_timing.overlap(attention, ffn)
    assert got == {
        "step_ms": 10.0,
        "attention_busy_ms": 6.0,
        "attention_wait_ms": 4.0,
        "ffn_busy_ms": 5.0,
        "pipeline_efficiency": 0.6,
    }
    # The FFN the busier role: its busy time over the step.
    assert (
        step_timing.overlap(attention, {**ffn, "compute": 8.5})["pipeline_efficiency"]
        == 0.9
    )
    with pytest.raises(ValueError, match="must take time"):
        step_timing.overlap({"step_ms": 0.0}, ffn)
