# SPDX-License-Identifier: Apache-2.0
"""The ``afd-e2e`` command as these tests run it, and the local Ray cluster
they share (``afd-e2e cluster up|down``, as users start and stop it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_runner import afd_e2e


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
