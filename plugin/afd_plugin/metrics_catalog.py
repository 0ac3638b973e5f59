# SPDX-License-Identifier: Apache-2.0
"""The AFD metrics a server exposes on vLLM's ``/metrics``: names, help and
labels, pure data (no prometheus_client, no torch, no vLLM).

The role's engine process counts them (``afd_plugin.metrics``), the API
server's stat-logger plugin exposes them (``runtime/stat_logger.py``), and
the metrics page's table (docs/metrics.md) and the Grafana dashboard
(``examples/grafana``) are checked against this one list.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    name: str
    """Prometheus name without the ``_total`` suffix of a counter."""
    help: str
    labels: tuple[str, ...]

    @property
    def sample(self) -> str:
        """The name a scrape shows (counters end in ``_total``)."""
        return f"{self.name}_total"


STEPS = MetricSpec(
    "afd:steps",
    "Steps this AFD role served (attention: model steps; FFN: steps of the "
    "control plane, or dispatches without one).",
    ("role", "rank"),
)
PART_SECONDS = MetricSpec(
    "afd:step_part_seconds",
    "Seconds of each part of an AFD role's steps (attention: between, runner, "
    "announce, send, wait (for the FFN's output), compute; FFN: control (waiting "
    "for the next step), recv (waiting for a layer's input), compute, send).",
    ("role", "rank", "part"),
)
MICRO_BATCHES = MetricSpec(
    "afd:micro_batches",
    "Micro-batch stages the attention role announced, summed over its model "
    "calls (vLLM's profile and dummy runs included, which afd:steps_total "
    "does not count).",
    ("role", "rank"),
)
EXCHANGE_FAILURES = MetricSpec(
    "afd:exchange_failures",
    "Exchanges that failed and ended the role's serving, by reason: "
    "peer (a peer left, closed or never answered within peer_timeout_s), "
    "wire (a payload or tensor that breaks the exchange contract), "
    "error (anything else).",
    ("role", "rank", "reason"),
)
RENDEZVOUS_REFUSALS = MetricSpec(
    "afd:rendezvous_refusals",
    "Joins the AFD rendezvous this server hosts refused, by reason: "
    "auth (no proof of the deployment's secret), protocol (not an AFD join), "
    "admission (a rank already taken, a world already formed, another world "
    "size).",
    ("reason",),
)
FFN_FAILOVERS = MetricSpec(
    "afd:ffn_failovers",
    "Failovers an attention rank made: its FFN rank died or stopped answering "
    "and a standby FFN server took its place mid-step (num_ffn_standby).",
    ("role", "rank"),
)
STANDBY_PROMOTIONS = MetricSpec(
    "afd:standby_promotions",
    "1 on a standby FFN server once it was promoted in place of a dead FFN "
    "rank and serves its attention ranks.",
    ("role", "rank"),
)
STANDBYS_LOST = MetricSpec(
    "afd:standbys_lost",
    "Standby FFN servers that left the rendezvous this server hosts while "
    "waiting, without a shutdown (killed or crashed); exposed by the host, "
    "the first attention rank.",
    ("role", "rank"),
)
METRICS: tuple[MetricSpec, ...] = (
    STEPS,
    PART_SECONDS,
    MICRO_BATCHES,
    EXCHANGE_FAILURES,
    RENDEZVOUS_REFUSALS,
    FFN_FAILOVERS,
    STANDBY_PROMOTIONS,
    STANDBYS_LOST,
)
FAILURE_REASONS = ("peer", "wire", "error")
REFUSAL_REASONS = ("auth", "protocol", "admission")


def metrics_table() -> str:
    """The metrics page's table (Markdown)."""
    rows = ["| Metric | Labels | Meaning |", "| --- | --- | --- |"]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in m.labels)
        rows.append(f"| `{m.sample}` | {labels} | {m.help} |")
    return "\n".join(rows)
