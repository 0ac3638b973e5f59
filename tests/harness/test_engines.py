# SPDX-License-Identifier: Apache-2.0
"""Engine choice and the local Ray cluster's bookkeeping: flags that do not go
together are refused before anything starts, every node of a local cluster
gets ports of its own, and ``cluster down`` without a cluster says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.cli import main
from afd_e2e.engines import ray_cluster
from afd_e2e.launch import ports as harness_ports


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ray-address", "127.0.0.1:1"], "--ray-address is for --engine ray"),
        (
            ["--engine", "ray", "--node-network", "netns"],
            "--node-network is for --engine local",
        ),
    ],
)
def test_flags_of_another_engine_are_refused(
    flags: list[str], message: str, tmp_path: Path, capsys
) -> None:
    code = main(
        ["run", "cpu-2node-1a1f", *flags, "--root", str(ROOT), "--dry-run"]
        + ["--model-root", str(tmp_path)]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_each_local_node_gets_its_own_ports() -> None:
    def ports(index: int | None) -> dict[str, int]:
        argv = ray_cluster._node_ports(index)
        return {argv[i]: int(argv[i + 1]) for i in range(0, len(argv), 2)}

    head, first, second = ports(None), ports(0), ports(1)
    daemons = [
        p
        for node in (head, first, second)
        for f, p in node.items()
        if "worker-port" not in f
    ]
    assert len(set(daemons)) == len(daemons)
    ranges = [
        range(node["--min-worker-port"], node["--max-worker-port"] + 1)
        for node in (head, first, second)
    ]
    for a in range(3):
        for b in range(a + 1, 3):
            assert set(ranges[a]).isdisjoint(ranges[b])
    # worker ports come from the block single picks never use (a daemon's
    # port inside a node's worker range makes Ray refuse to start the node)
    block = range(harness_ports.RANGE_BLOCK[0], harness_ports.RANGE_BLOCK[1] + 1)
    assert all(set(r) <= set(block) for r in ranges)
    assert not set(daemons) & set(block)


def test_a_local_cluster_larger_than_its_port_block_is_refused(tmp_path: Path) -> None:
    nodes = [f"node-{i}" for i in range(ray_cluster.MAX_WORKER_NODES + 1)]
    with pytest.raises(ray_cluster.ClusterError, match="nothing was started"):
        ray_cluster.up(nodes, tmp_path / "state")
    assert not (tmp_path / "state").exists()


def test_cluster_state_round_trips(tmp_path: Path) -> None:
    state = ray_cluster.ClusterState(
        "127.0.0.1:6379", "ray-cluster-abc", "/tmp/afd-ray-abc", 1, {"node-a": 2}
    )
    state.save(tmp_path)
    assert ray_cluster.ClusterState.load(tmp_path) == state
    assert ray_cluster.ClusterState.load(tmp_path / "none") is None


def test_cluster_down_without_a_cluster_says_so(tmp_path: Path, capsys) -> None:
    code = main(["cluster", "down", "--state-dir", str(tmp_path)])
    assert code == 1
    assert f"no cluster state at {tmp_path / 'cluster.json'}" in capsys.readouterr().err


def test_cluster_up_refuses_a_second_cluster(tmp_path: Path, capsys) -> None:
    ray_cluster.ClusterState("a:1", "m", "/tmp/x", 1).save(tmp_path)
    code = main(["cluster", "up", "--state-dir", str(tmp_path)])
    assert code == 1
    assert "a cluster is already up" in capsys.readouterr().err


@pytest.mark.parametrize("nodes", ["", "node-a,node-a", "Node_A"])
def test_cluster_node_names_are_checked(nodes: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["cluster", "up", "--nodes", nodes])
    assert exc.value.code == 2
    assert "expected distinct node names" in capsys.readouterr().err
