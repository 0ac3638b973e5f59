# SPDX-License-Identifier: Apache-2.0
"""Reading a vLLM server's Prometheus text (``/metrics``): the one parser the
harness's checks and tests use for vLLM's own counters and gauges."""

from __future__ import annotations

import re
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(base_url: str, timeout_s: float = 30.0) -> str:
    """The server's ``/metrics`` text, straight to it (no proxy)."""
    url = base_url.rstrip("/") + "/metrics"
    with _OPENER.open(url, timeout=timeout_s) as response:
        return response.read().decode()


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the series of ``name`` whose labels include ``labels``. A name
    the text does not hold raises ``KeyError`` (a renamed metric must not
    read as zero)."""
    series = re.compile(rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$", re.M)
    found = False
    total = 0.0
    for label_text, value in series.findall(text):
        found = True
        have = dict(_LABEL.findall(label_text))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(value)
    if not found:
        raise KeyError(f"{name} is not in the scraped metrics")
    return total


def afd_step_ms(before: str, after: str, role: str) -> dict[str, float]:
    """Per-step means (ms) of ``role``'s step parts between two scrapes of
    its server (``afd:step_part_seconds_total`` over ``afd:steps_total``,
    summed over the server's ranks), with ``step_ms`` their sum: the parts
    tile the step. Raises ``ValueError`` when the role ran no step."""
    steps = metric_sum(after, "afd:steps_total", role=role) - metric_sum(
        before, "afd:steps_total", role=role
    )
    if steps <= 0:
        raise ValueError(f"the {role} role ran no step between the scrapes")
    parts = sorted(set(_role_parts(after, role)))
    out = {
        part: 1e3
        * (
            metric_sum(after, "afd:step_part_seconds_total", role=role, part=part)
            - metric_sum(before, "afd:step_part_seconds_total", role=role, part=part)
        )
        / steps
        for part in parts
    }
    out["step_ms"] = sum(out.values())
    out["steps"] = steps
    return out


def _role_parts(text: str, role: str) -> list[str]:
    pattern = re.compile(
        rf'^afd:step_part_seconds_total\{{(?=[^}}]*role="{re.escape(role)}")'
        r'[^}]*part="(\w+)"',
        re.M,
    )
    return pattern.findall(text)
