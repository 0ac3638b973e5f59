# SPDX-License-Identifier: Apache-2.0
"""Last in this directory: ``afd-e2e cluster down`` stops the shared cluster
within its grace, and no Ray process of it is left."""

from __future__ import annotations

import pytest
from local_cluster import LocalCluster

from afd_e2e.engines.ray_cluster import leftovers

pytestmark = pytest.mark.e2e


def test_cluster_down_leaves_no_ray_process(cluster: LocalCluster) -> None:
    assert leftovers(cluster.marker), "the cluster's processes carry its marker"
    done = cluster.down()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ray cluster down in" in done.stdout
    assert leftovers(cluster.marker) == []
    assert not (cluster.state_dir / "cluster.json").exists()
