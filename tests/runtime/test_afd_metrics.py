# SPDX-License-Identifier: Apache-2.0
"""AFD's counters: a role's step clock feeds them, every series exists from
the start, and AFD_METRICS=0 leaves the clock off."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from afd_plugin import step_timing
from afd_plugin.runtime import afd_metrics


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


@pytest.fixture
def fresh_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own ffn clock (the process-wide one stays untouched)."""
    monkeypatch.setattr(step_timing, "_clocks", {})


def test_steps_and_parts_are_counted_per_role_and_rank(fresh_clock: None) -> None:
    assert afd_metrics.install("ffn", 7)
    labels = {"role": "ffn", "rank": "7"}
    # Every part's series is there before any step, at 0.
    for part in step_timing.FFN_PARTS:
        assert value("afd:step_part_seconds_total", part=part, **labels) == 0.0
    assert value("afd:steps_total", **labels) == 0.0
    clock = step_timing.clock("ffn")
    clock.step()
    clock.add("compute", 0.25)
    clock.add("recv", 0.5)
    clock.step()
    clock.add("compute", 0.25)
    clock.step()
    assert value("afd:steps_total", **labels) == 2.0
    assert value("afd:step_part_seconds_total", part="compute", **labels) == 0.5
    assert value("afd:step_part_seconds_total", part="recv", **labels) == 0.5
    assert afd_metrics.install("ffn", 7)  # once per process: no second sink
    clock.add("send", 1.0)
    clock.step()
    assert value("afd:step_part_seconds_total", part="send", **labels) == 1.0


def test_off_leaves_the_clock_untimed(
    fresh_clock: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AFD_METRICS", "0")
    monkeypatch.delenv("AFD_STEP_TIMING", raising=False)
    assert not afd_metrics.install("attention", 3)
    assert not step_timing.clock("attention").enabled
    afd_metrics.count_micro_batches("attention", 3, 2)
    assert value("afd:micro_batches_total", role="attention", rank="3") is None
