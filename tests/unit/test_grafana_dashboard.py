# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard asks only for metrics and labels AFD exposes, and
shows every one of them (the catalog: ``afd_plugin.metrics_catalog``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from afd_plugin.metrics_catalog import METRICS

DASHBOARD = Path(__file__).parents[2] / "examples" / "grafana" / "afd_dashboard.json"
SCRAPE_LABELS = {"instance", "job"}
"""Labels Prometheus adds to every scraped series."""


def exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_every_query_names_catalog_metrics_and_labels() -> None:
    samples = {m.sample: set(m.labels) | SCRAPE_LABELS for m in METRICS}
    for expr in exprs():
        depth = 0
        for ch in expr:
            depth += {"(": 1, ")": -1}.get(ch, 0)
            assert depth >= 0, expr
        assert depth == 0, expr
        names = re.findall(r"afd:[a-z_]+", expr)
        assert names, expr
        allowed = set.union(*(samples[n] for n in names))  # KeyError: unknown
        used = set(re.findall(r"(\w+)\s*(?:=~|=|!=)\s*\"", expr))
        for group in re.findall(r"(?:by|ignoring|on)\s*\(([^)]*)\)", expr):
            used |= {label.strip() for label in group.split(",") if label.strip()}
        assert used <= allowed, (expr, used - allowed)


def test_every_metric_has_a_panel() -> None:
    shown = " ".join(exprs())
    for spec in METRICS:
        assert spec.sample in shown, spec.sample


def test_panels_are_distinct_and_use_the_datasource_input() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(
        p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in dashboard["panels"]
    )
