# SPDX-License-Identifier: Apache-2.0
"""Gate policy constants of AFD-I12, defined once for scenarios, lint and run.

The marker-scan teardown exception and the GSM8K floors live only here.
"""

from __future__ import annotations

# The only scenarios whose FFN survivors may be found by scanning
# /proc/*/environ for the run markers and SIGKILLed without failing the run.
MARKER_SCAN_SCENARIOS: frozenset[str] = frozenset(
    {"afd-eager-async-cam", "afd-dsv4-flash-async-cam-dp2tp4-ep8"}
)

# A PR-gate scenario uses at most this many devices; an AFD one is exactly 2A2F.
PR_MAX_DEVICES = 4
PR_AFD_TOPOLOGY = (2, 2)

# GSM8K floors for DBO scenarios: concurrency and sample count.
DBO_MIN_CONCURRENCY = 12
DBO_MIN_SAMPLES = 24

# Environment variables a CI gate must never set (or lower).
GSM8K_LIMIT_ENV = "AFD_GSM8K_LIMIT"
GSM8K_THRESHOLD_ENV = "AFD_GSM8K_THRESHOLD"
GSM8K_DATA_ENV = "AFD_GSM8K_DATA"

# Markers every process the harness starts carries in its environment.
RUN_ID_ENV = "AFD_E2E_RUN_ID"
PROCESS_ROLE_ENV = "AFD_E2E_PROCESS_ROLE"


def is_ci(environ: dict[str, str]) -> bool:
    """CI runs set ``CI`` or ``BUILDKITE``."""
    return any(environ.get(name) for name in ("CI", "BUILDKITE"))
