# SPDX-License-Identifier: Apache-2.0
"""The ``afd-e2e`` command as these tests run it, and the local Ray cluster
they share (``afd-e2e cluster up|down``, as users start and stop it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


class LocalCluster:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.up = afd_e2e("cluster", "up", "--state-dir", str(state_dir), timeout_s=300)
        state_file = state_dir / "cluster.json"
        self.state = json.loads(state_file.read_text()) if state_file.exists() else {}

    @property
    def marker(self) -> str:
        return self.state["marker"]

    def down(self) -> subprocess.CompletedProcess[str]:
        return afd_e2e(
            "cluster", "down", "--state-dir", str(self.state_dir), timeout_s=120
        )
