# SPDX-License-Identifier: Apache-2.0
"""The line protocol between the lm-eval child and the parent that starts it:
the child's module and the tags that open its progress, result and error lines."""

from __future__ import annotations

CHILD_MODULE = "afd_e2e.checks.gsm8k.lmeval"
"""Started as ``python -m CHILD_MODULE SPEC.json``."""
PROGRESS = "AFD_GSM8K_PROGRESS"
"""``PROGRESS <done> <total> <elapsed_s>``: requests finished so far."""
DONE = "AFD_GSM8K_DONE"
"""``DONE <json>``: where lm-eval saved its results, and the request counts."""
ERROR = "AFD_GSM8K_ERROR"
"""``ERROR <one line>``: why the lm-eval run failed."""
