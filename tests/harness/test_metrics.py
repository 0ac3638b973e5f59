# SPDX-License-Identifier: Apache-2.0
"""The Prometheus text reader the checks use on vLLM's /metrics."""

from __future__ import annotations

import pytest

from afd_e2e.checks.metrics import afd_step_ms, metric_sum

TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 8.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 8.0
vllm:prefix_cache_hits_total 1.5e+02
"""


def test_series_are_summed_over_the_labels_asked_for() -> None:
    assert metric_sum(TEXT, "vllm:num_requests_running") == 5.0
    assert metric_sum(TEXT, "vllm:num_requests_running", engine="1") == 2.0
    assert metric_sum(TEXT, "vllm:request_success_total") == 16.0
    assert (
        metric_sum(TEXT, "vllm:request_success_total", finished_reason="abort") == 8.0
    )
    assert metric_sum(TEXT, "vllm:prefix_cache_hits_total") == 150.0


def test_a_series_without_the_labels_counts_zero_but_a_missing_name_fails() -> None:
    assert metric_sum(TEXT, "vllm:num_requests_running", engine="7") == 0.0
    with pytest.raises(KeyError, match="vllm:num_preemptions_total"):
        metric_sum(TEXT, "vllm:num_preemptions_total")
    # A longer name that begins with the one asked for is another metric.
    with pytest.raises(KeyError):
        metric_sum(TEXT, "vllm:request_success")


def afd_text(steps: dict[str, float], parts: dict[tuple[str, str, str], float]) -> str:
    lines = [
        f'afd:steps_total{{rank="{rank}",role="{role}"}} {value}'
        for (role, rank), value in ((tuple(k.split(":")), v) for k, v in steps.items())
    ]
    lines += [
        f'afd:step_part_seconds_total{{part="{part}",rank="{rank}",role="{role}"}} {v}'
        for (role, rank, part), v in parts.items()
    ]
    return "\n".join(lines) + "\n"


def test_afd_step_parts_are_per_step_means_over_every_rank() -> None:
    # Two attention ranks (one server, DP2) between two scrapes: 10 steps each.
    before = afd_text(
        {"attention:0": 5, "attention:1": 5},
        {("attention", "0", "wait"): 0.1, ("attention", "1", "wait"): 0.1},
    )
    after = afd_text(
        {"attention:0": 15, "attention:1": 15},
        {
            ("attention", "0", "wait"): 0.2,
            ("attention", "1", "wait"): 0.3,
            ("attention", "0", "compute"): 0.4,
            ("attention", "1", "compute"): 0.4,
        },
    )
    means = afd_step_ms(before + 'afd:steps_total{role="x"} 0\n', after, "attention")
    assert means["steps"] == 20
    assert means["wait"] == pytest.approx(1e3 * 0.3 / 20)
    assert means["compute"] == pytest.approx(1e3 * 0.8 / 20)
    assert means["step_ms"] == pytest.approx(means["wait"] + means["compute"])
    with pytest.raises(ValueError, match="ran no step"):
        afd_step_ms(after, after, "attention")
