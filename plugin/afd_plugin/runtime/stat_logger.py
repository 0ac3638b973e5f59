# SPDX-License-Identifier: Apache-2.0
"""AFD's counters on vLLM's ``/metrics``, through vLLM's stat-logger plugin
point (the ``vllm.stat_logger_plugins`` entry point ``afd``).

vLLM builds one :class:`AFDStatLogger` in each API server. On a server with
an ``afd`` section it registers a collector that, at every scrape, reads the
counters the server's engine and workers wrote to the server's counter
directory (``afd_plugin.metrics_file``) and shows them as Prometheus
counters beside vLLM's own. A server without AFD shows nothing new. With
``PROMETHEUS_MULTIPROC_DIR`` set, vLLM's ``/metrics`` reads prometheus_client's
multiprocess files instead, where the engine writes the counters itself
(``afd_plugin.metrics``), so the collector stays out of the way.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from vllm.config import VllmConfig
from vllm.v1.metrics.loggers import AggregateStatLoggerBase

from afd_plugin import envs, metrics_file
from afd_plugin.metrics_catalog import METRICS

logger = logging.getLogger("afd_plugin")
_lock = threading.Lock()
_collector: CounterDirectoryCollector | None = None


class CounterDirectoryCollector(Collector):
    """Every AFD counter in ``directory``, one family per catalog entry (the
    families are there before the first count, with no samples)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def describe(self) -> Iterator[CounterMetricFamily]:
        # Names only: registering must not read the directory.
        for spec in METRICS:
            yield CounterMetricFamily(spec.name, spec.help, labels=spec.labels)

    def collect(self) -> Iterator[CounterMetricFamily]:
        values = metrics_file.read_directory(self.directory)
        for spec in METRICS:
            family = CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
            for (name, labels), value in sorted(values.items()):
                if name == spec.name:
                    by_name = dict(labels)
                    family.add_metric([by_name.get(k, "") for k in spec.labels], value)
            yield family


def expose(directory: str) -> CounterDirectoryCollector:
    """Register the collector for ``directory`` on prometheus_client's default
    registry, which vLLM's ``/metrics`` serves (once per process)."""
    global _collector
    with _lock:
        if _collector is None:
            _collector = CounterDirectoryCollector(directory)
            REGISTRY.register(_collector)
        return _collector


class AFDStatLogger(AggregateStatLoggerBase):
    """Shows the AFD counters of an AFD server's engine on its ``/metrics``;
    records nothing of vLLM's own stats (vLLM's loggers do)."""

    def __init__(self, vllm_config: VllmConfig, engine_indexes: list[int]) -> None:
        self.collector: CounterDirectoryCollector | None = None
        additional = vllm_config.additional_config or {}
        if "afd" not in additional or not envs.get("AFD_METRICS"):
            return
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            return  # the engine writes multiprocess files vLLM collects
        self.collector = expose(metrics_file.claim_directory())
        logger.info(
            "afd-plugin: /metrics shows the AFD counters in %s",
            self.collector.directory,
        )

    def record(self, *args: Any, **kwargs: Any) -> None:
        return None

    def log_engine_initialized(self) -> None:
        return None
