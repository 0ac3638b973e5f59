# SPDX-License-Identifier: Apache-2.0
"""Multi-node scenarios through ``--engine ray`` on a local 3-node Ray cluster:
each server runs under an actor on its placement node, token parity and GSM8K
answer agreement hold against the colocated run, teardown is clean on every
node, and nothing of the run is left anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from local_cluster import LocalCluster, afd_e2e

from afd_e2e.engines.ray_cluster import leftovers

pytestmark = pytest.mark.e2e

RUN_LIMIT_S = 1500


def run_on_ray(
    scenario: str, cluster: LocalCluster, run_dir: Path, model_root: Path
) -> dict:
    done = afd_e2e(
        "run",
        scenario,
        "--engine",
        "ray",
        "--cluster-state",
        str(cluster.state_dir),
        "--run-dir",
        str(run_dir),
        "--model-root",
        str(model_root),
        "--json",
        timeout_s=RUN_LIMIT_S,
    )
    results_path = run_dir / "results.json"
    assert results_path.exists(), done.stdout[-2000:] + done.stderr[-4000:]
    results = json.loads(results_path.read_text())
    assert done.returncode == results["exit_code"], done.stderr[-4000:]
    return results


def test_dry_run_shows_the_node_and_argv_of_each_server(
    cluster: LocalCluster, tmp_path: Path, tiny_model_root: Path
) -> None:
    done = afd_e2e(
        "run",
        "cpu-2node-2a1f",
        "--engine",
        "ray",
        "--cluster-state",
        str(cluster.state_dir),
        "--dry-run",
        "--model-root",
        str(tiny_model_root),
        "--run-dir",
        str(tmp_path / "run"),
        timeout_s=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "engine ray" in out
    assert "[ffn-0] node node-b  api http://127.0.0.1:" in out
    assert "[attention-0] node node-a  api http://127.0.0.1:" in out
    assert out.count("  argv ") == 3  # baseline, ffn, attention
    # and which Ray node of the cluster each logical node is
    ray_lines = [ln for ln in out.splitlines() if ln.startswith("ray      ")]
    assert [ln.split()[1] for ln in ray_lines] == ["node-a", "node-b"]
    assert len({ln.split()[5] for ln in ray_lines}) == 2  # two Ray nodes
    assert not (tmp_path / "run").exists()  # nothing ran


@pytest.mark.parametrize("scenario", ["cpu-2node-2a1f", "cpu-2node-2a1f-split"])
def test_multi_node_scenario_on_ray(
    scenario: str, cluster: LocalCluster, tmp_path: Path, tiny_model_root: Path
) -> None:
    results = run_on_ray(scenario, cluster, tmp_path / "run", tiny_model_root)
    checks = {c["name"]: c for c in results["checks"]}
    assert results["outcome"] == "passed", json.dumps(results, indent=1)[-4000:]
    assert checks["parity"]["figures"]["mismatched_prompts"] == 0
    assert checks["gsm8k_answers"]["passed"], checks["gsm8k_answers"]
    assert checks["gsm8k_answers"]["figures"]["compared"] == 8

    # Each server ran under an actor on the Ray node of its placement node:
    # attention and FFN on two different Ray nodes.
    commands = results["commands"]
    assert commands["ffn:0"]["node"] == "node-b"
    assert commands["attention:0"]["node"] == "node-a"
    assert commands["ffn:0"]["ray_node"] != commands["attention:0"]["ray_node"]
    assert commands["baseline:0"]["ray_node"] == commands["attention:0"]["ray_node"]

    # Teardown by the actors: SIGTERM only, and no process of the run on any
    # node afterwards (the per-node marker scan, and this machine's /proc).
    teardown = results["teardown"]
    assert teardown["escalated"] == [] and teardown["leaks"] == []
    assert teardown["errors"] == []
    assert set(teardown["exit_codes"]) == set(commands)
    assert leftovers(results["run_id"]) == []

    if scenario == "cpu-2node-2a1f-split":
        # attention's second DP rank is a headless `vllm serve` on the FFN's
        # Ray node, in the DP group of the first
        worker, leader = commands["attention:1"], commands["attention:0"]
        assert worker["node"] == "node-b"
        assert worker["ray_node"] == commands["ffn:0"]["ray_node"]
        assert worker["argv"][1:4] == ["-m", "afd_plugin.vllm_cli", "serve"]
        assert "--headless" in worker["argv"] and "--host" not in worker["argv"]
        for flag in ("--data-parallel-address", "--data-parallel-rpc-port"):
            at = worker["argv"].index(flag) + 1
            assert worker["argv"][at] == leader["argv"][leader["argv"].index(flag) + 1]


def test_a_standby_takes_over_on_ray(
    cluster: LocalCluster, tmp_path: Path, tiny_model_root: Path
) -> None:
    """``cpu-2node-1a1f-failover`` on Ray (1A1F on two Ray nodes; the 1A1F
    split with GSM8K runs across network namespaces in tox -e e2e): the
    standby runs under an actor on the FFN's node, the FFN server is
    SIGKILLed by its actor mid-generation (the injected fault), the standby
    takes over and every stream completes with the colocated tokens."""
    scenario = "cpu-2node-1a1f-failover"
    results = run_on_ray(scenario, cluster, tmp_path / "run", tiny_model_root)
    checks = {c["name"]: c for c in results["checks"]}
    assert results["outcome"] == "passed", json.dumps(results, indent=1)[-4000:]
    assert checks["parity"]["figures"]["mismatched_prompts"] == 0
    failover = checks["ffn_failover"]["figures"]
    assert failover["killed"] == ["ffn-0"] and failover["promoted"] == ["standby-0"]
    assert failover["completed"] == 16 and failover["mismatched_streams"] == 0
    commands = results["commands"]
    assert commands["standby:0"]["node"] == "node-b"
    assert commands["standby:0"]["ray_node"] == commands["ffn:0"]["ray_node"]
    assert commands["ffn:0"]["ray_node"] != commands["attention:0"]["ray_node"]
    teardown = results["teardown"]
    assert teardown["escalated"] == [] and teardown["leaks"] == []
    assert {p["name"] for p in teardown["injected"]} == {"ffn:0"}
    assert leftovers(results["run_id"]) == []
