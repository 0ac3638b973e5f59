# SPDX-License-Identifier: Apache-2.0
"""The Prometheus text reader the checks use on vLLM's /metrics."""

from __future__ import annotations

import pytest

from afd_e2e.metrics import metric_sum

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
