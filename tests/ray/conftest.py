# SPDX-License-Identifier: Apache-2.0
"""A local Ray cluster (head + node-a + node-b) shared by this directory's
tests, started and stopped the way users do it: ``afd-e2e cluster up|down``.
The cluster's end is a test of its own (test_zz_cluster_down.py); the
fixture only stops what that test did not."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = LocalCluster(tmp_path_factory.mktemp("ray") / "cluster")
    try:
        assert started.up.returncode == 0, started.up.stdout + started.up.stderr
        yield started
    finally:
        if (started.state_dir / "cluster.json").exists():
            started.down()


@pytest.fixture(scope="session")
def tiny_model_root() -> Path:
    from afd_e2e.tiny_model import default_root

    return default_root()
