# SPDX-License-Identifier: Apache-2.0
"""A multi-node scenario through ``--engine local``: one network namespace per
logical node, so the attention and FFN servers have different addresses and
reach each other over a bridge (never loopback, never shared memory). Where
the machine refuses namespaces, the refusal must name why, and the loopback
variant runs instead: either way a real run is checked."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_main_job import afd_e2e, processes_with_marker

from afd_e2e.engines.netns import NodeNetwork

pytestmark = pytest.mark.e2e

RUN_LIMIT_S = 1500


def run(scenario: str, network: str, run_dir: Path, model_root: Path):
    return afd_e2e(
        "run",
        scenario,
        "--node-network",
        network,
        "--run-dir",
        str(run_dir),
        "--model-root",
        str(model_root),
        "--json",
        timeout_s=RUN_LIMIT_S,
    )


def afd_links() -> set[str]:
    """Network interfaces of the harness's namespaces on this machine now."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True)
    names = {line.split(":")[1].strip() for line in links.stdout.splitlines()}
    return {n.split("@")[0] for n in names if n.startswith("afd")}


@pytest.mark.parametrize("scenario", ["cpu-2node-1a1f", "cpu-2node-2a1f-split"])
def test_two_nodes_in_their_own_network_namespaces(
    scenario: str, tmp_path: Path, tiny_model_root: Path
) -> None:
    before = set(NodeNetwork.existing())
    links_before = afd_links()
    why = NodeNetwork.unavailable()
    network = "netns"
    if why is not None:
        refused = run(scenario, "netns", tmp_path / "refused", tiny_model_root)
        assert refused.returncode == 2
        assert why in refused.stderr and "nothing was started" in refused.stderr
        network = "loopback"
    done = run(scenario, network, tmp_path / "run", tiny_model_root)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert done.returncode == 0, json.dumps(results["checks"]) + done.stderr[-3000:]
    checks = {c["name"]: c for c in results["checks"]}
    assert checks["parity"]["figures"]["mismatched_prompts"] == 0
    assert checks["gsm8k_answers"]["figures"]["differing"] == 0
    assert results["teardown"]["escalated"] == []
    assert processes_with_marker(results["run_id"]) == []
    if network == "netns":
        commands = results["commands"]
        ffn, attention = commands["ffn:0"]["argv"], commands["attention:0"]["argv"]
        # each server ran inside its node's namespace, on its node's address
        assert ffn[:3] == ["ip", "netns", "exec"] and ffn[3].endswith("-node-b")
        assert attention[3].endswith("-node-a")
        host = attention[attention.index("--host") + 1]
        config = json.loads(attention[attention.index("--additional-config") + 1])
        assert host.startswith("10.") and config["afd"]["host"] != host
        assert config["afd"]["host"] == ffn[ffn.index("--host") + 1]
        # attention and FFN could not share memory across namespaces; with a
        # split role the FFN's block spans both nodes, so every rank of it
        # takes gloo, the one beside the FFN too
        for name in commands:
            if name.startswith(("attention", "ffn")):
                log = (tmp_path / "run" / f"{name.replace(':', '-')}.log").read_text(
                    errors="replace"
                )
                assert "gloo data path (these peers run on another machine" in log
        if scenario == "cpu-2node-2a1f-split":
            # the second attention DP rank: a headless `vllm serve` in node-b's
            # namespace, joining the DP group at node-a's address
            worker = commands["attention:1"]["argv"]
            assert worker[3].endswith("-node-b") and worker[4:8] == [
                attention[4],
                "-m",
                "afd_plugin.vllm_cli",
                "serve",
            ]
            dp_address = worker[worker.index("--data-parallel-address") + 1]
            assert dp_address == host
        # the namespaces and the bridge are gone
        assert set(NodeNetwork.existing()) == before
        assert afd_links() == links_before
