# SPDX-License-Identifier: Apache-2.0
"""GSM8K accuracy gate: real lm-eval against the attention role's API, offline.

``run_gsm8k(Gsm8kRequest) -> Gsm8kResult``, shared by ``afd-e2e gsm8k`` and
``afd-e2e run``. Modules: request.py (the request and result), run.py (the
runner), worker.py (starts the lm-eval child), lmeval.py (the child, run as
``python -m afd_e2e.checks.gsm8k.lmeval``), protocol.py (their line protocol),
gate.py (overrides, refusals, verdict), data.py (local splits), items.py
(generated items for runs without a data set).
"""

from __future__ import annotations

from afd_e2e.checks.gsm8k.request import Gsm8kRequest, Gsm8kResult, completions_url
from afd_e2e.checks.gsm8k.run import run_gsm8k

__all__ = ["Gsm8kRequest", "Gsm8kResult", "completions_url", "run_gsm8k"]
