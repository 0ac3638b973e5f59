# SPDX-License-Identifier: Apache-2.0
"""The ``afd-e2e`` command as the end-to-end tests run it: a user's command
line, in its own session, from the repository root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def afd_e2e(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """The ``afd-e2e`` command as a user runs it, in its own session."""
    return subprocess.run(
        [sys.executable, "-m", "afd_e2e.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        start_new_session=True,
    )
