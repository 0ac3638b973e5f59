# SPDX-License-Identifier: Apache-2.0
"""A local Ray cluster (head + node-a + node-b) shared by this directory's
tests. The cluster's end is a test of its own (test_zz_cluster_down.py); the
fixture only stops what that test did not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from local_cluster import LocalCluster


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
