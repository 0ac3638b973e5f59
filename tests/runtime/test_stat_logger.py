# SPDX-License-Identifier: Apache-2.0
"""The API server's side of AFD's counters: vLLM loads the stat-logger plugin,
which shows what the engine's processes wrote, on an AFD server only."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from afd_plugin.metrics_catalog import METRICS
from afd_plugin.runtime import stat_logger


def test_vllm_finds_the_plugin() -> None:
    from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories

    assert stat_logger.AFDStatLogger in load_stat_logger_plugin_factories()


def test_the_collector_shows_every_family_and_the_engines_values(
    tmp_path: Path,
) -> None:
    (tmp_path / "11.json").write_text(
        json.dumps(
            {
                "pid": 11,
                "series": [
                    {
                        "name": "afd:steps",
                        "labels": {"role": "ffn", "rank": "0"},
                        "value": 5,
                    },
                    {
                        "name": "afd:exchange_failures",
                        "labels": {"role": "ffn", "rank": "0", "reason": "peer"},
                        "value": 1,
                    },
                ],
            }
        )
    )
    registry = CollectorRegistry()
    registry.register(stat_logger.CounterDirectoryCollector(str(tmp_path)))
    value = registry.get_sample_value
    assert value("afd:steps_total", {"role": "ffn", "rank": "0"}) == 5
    assert (
        value(
            "afd:exchange_failures_total",
            {"role": "ffn", "rank": "0", "reason": "peer"},
        )
        == 1
    )
    families = {m.name for m in registry.collect()}
    assert families == {spec.name for spec in METRICS}


def config(additional: dict) -> SimpleNamespace:
    return SimpleNamespace(additional_config=additional)


def test_only_an_afd_server_exposes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.delenv("AFD_METRICS_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(stat_logger, "_collector", None)
    registered: list[object] = []
    monkeypatch.setattr(stat_logger.REGISTRY, "register", registered.append)
    plain = stat_logger.AFDStatLogger(config({}), [0])  # type: ignore[arg-type]
    assert plain.collector is None and not registered
    afd = stat_logger.AFDStatLogger(config({"afd": {"role": "ffn"}}), [0])  # type: ignore[arg-type]
    assert afd.collector is not None
    assert afd.collector.directory == str(tmp_path / f"afd-metrics-{os.getpid()}")
    # One collector per API server, however many engines it logs for.
    again = stat_logger.AFDStatLogger(config({"afd": {"role": "ffn"}}), [1])  # type: ignore[arg-type]
    assert again.collector is afd.collector and registered == [afd.collector]
    # In multiprocess mode vLLM collects the engine's own files instead.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert stat_logger.AFDStatLogger(config({"afd": {}}), [0]).collector is None  # type: ignore[arg-type]
