# SPDX-License-Identifier: Apache-2.0
"""Placement in scenarios: its rules (positioned errors, all at once), the
servers and flags the launch plan derives from it, and that a scenario without
one plans exactly as before."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from lint_repo import ROOT, make_repo

import afd_e2e.launch.plan as launch
from afd_e2e.cli import main
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.define.scenario import Scenario
from afd_e2e.engines.local import LocalEngine
from afd_e2e.engines.netns import NodeNetwork
from afd_plugin.config import parse_afd_config

GOLDEN = ROOT / "tests/data/one_node_plans.json"

# 16 attention ranks on two nodes (DP8 each, one server per node), 8 FFN
# ranks on a third; written here so the test does not depend on which
# hardware examples the catalogue holds.
MULTI_NODE_CUDA = {
    "schema_version": 1,
    "description": "16A8F over three hosts",
    "backend": "cuda",
    "tier": "nightly",
    "model": {
        "hub_id": "deepseek-ai/DeepSeek-V2-Lite",
        "architecture": "DeepseekV2ForCausalLM",
    },
    "connector": {"name": "P2pNcclAFDConnector"},
    "topology": {
        "attention": {"dp": 16, "tp": 1, "ep": True},
        "ffn": {"dp": 8, "tp": 1, "ep": True},
    },
    "placement": {
        "nodes": {"attn-0": {"interface": "ib0"}, "attn-1": {}, "ffn-0": {}},
        "attention": [
            {"node": "attn-0", "dp_local": 8, "devices": list(range(8))},
            {"node": "attn-1", "dp_local": 8, "devices": list(range(8))},
        ],
        "ffn": [{"node": "ffn-0", "dp_local": 8, "devices": list(range(8))}],
    },
}
ADDRESSES = {"attn-0": "10.0.0.1", "attn-1": "10.0.0.2", "ffn-0": "10.0.0.3"}


def counted_ports(monkeypatch) -> None:
    ports = itertools.count(20000)
    monkeypatch.setattr(launch, "free_port", lambda: next(ports))


def plan_of(scenario: Scenario, sid: str = "x", **kwargs) -> launch.LaunchPlan:
    return launch.build_plan(
        sid,
        scenario,
        model_root=Path("/models"),
        run_id="r",
        run_dir=Path("runs/r"),
        python="py",
        cpus=2,
        **kwargs,
    )


def arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize(
    "sid",
    [
        "cpu-eager-1a1f",
        "afd-eager-2a2f",
        "afd-dsv4-flash-async-cam-dp2tp4-ep8",
    ],
)
def test_a_scenario_without_placement_plans_as_before(sid: str, monkeypatch) -> None:
    # tests/data/one_node_plans.json was written by the plan code before
    # placement existed, with the same counted ports (its VLLM_PLUGINS later
    # gained the environment fixes' entry point, afd_env, and every server
    # became `vllm serve MODEL` through afd_plugin.vllm_cli instead of the
    # deprecated api_server module, with --api-server-count 1 (one API process):
    # plan_of(...).to_dict() of each id, json.dumps(indent=1, sort_keys=True)).
    counted_ports(monkeypatch)
    scenario = Catalogue.load(ROOT).get(sid)
    plan = plan_of(scenario, sid, baseline=True)
    assert plan.to_dict() == json.loads(GOLDEN.read_text())[sid]


def test_servers_flags_and_addresses_follow_the_placement(monkeypatch) -> None:
    counted_ports(monkeypatch)
    scenario = Scenario.model_validate(MULTI_NODE_CUDA)
    plan = plan_of(scenario, nodes=ADDRESSES)
    by_name = {r.name: r for r in plan.roles}
    assert list(by_name) == ["ffn-0", "attention-0", "attention-1"]
    leader, worker, ffn = (
        by_name["attention-0"],
        by_name["attention-1"],
        by_name["ffn-0"],
    )
    assert (leader.node, worker.node, ffn.node) == ("attn-0", "attn-1", "ffn-0")
    # the leader serves the API on its node; the worker is headless
    assert arg(leader.argv, "--host") == "10.0.0.1"
    assert plan.api is leader and leader.base_url.startswith("http://10.0.0.1:")
    assert worker.headless and "--host" not in worker.argv
    assert "--headless" in worker.argv and "--headless" not in leader.argv
    for server, start in ((leader, None), (worker, "8")):
        assert arg(server.argv, "--data-parallel-size") == "16"
        assert arg(server.argv, "--data-parallel-size-local") == "8"
        assert arg(server.argv, "--data-parallel-address") == "10.0.0.1"
        if start is not None:
            assert arg(server.argv, "--data-parallel-start-rank") == start
    rpc = {arg(s.argv, "--data-parallel-rpc-port") for s in (leader, worker)}
    assert len(rpc) == 1  # one DP group
    # AFD: every server rendezvouses at the first FFN server's node
    for server in plan.roles:
        config = parse_afd_config(json.loads(arg(server.argv, "--additional-config")))
        assert config is not None
        assert (config.host, config.secret_env) == ("10.0.0.3", launch.SECRET_ENV)
        assert len(server.env[launch.SECRET_ENV]) == 32
        assert server.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert plan.afd_host == "10.0.0.3"
    secrets = {s.env[launch.SECRET_ENV] for s in plan.roles}
    assert len(secrets) == 1  # one per run, shared by all servers
    # the named interface reaches every collective library of the backend
    assert leader.env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert leader.env["GLOO_SOCKET_IFNAME"] == "ib0"
    assert "NCCL_SOCKET_IFNAME" not in worker.env
    # printed plans never show the secret
    printed = json.dumps(plan.to_dict()) + launch.describe(plan)
    assert secrets.pop() not in printed
    assert "<per-run secret>" in printed


def test_dry_run_names_each_servers_node(tmp_path: Path, capsys) -> None:
    code = main(
        [
            "run",
            "cpu-2node-2a1f",
            "--dry-run",
            "--root",
            str(ROOT),
            "--model-root",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "nodes    node-a=127.0.0.1  node-b=127.0.0.1" in out
    assert "[ffn-0] node node-b  api http://127.0.0.1:" in out
    assert "[attention-0] node node-a  api http://127.0.0.1:" in out


def test_netns_dry_run_gives_each_node_its_own_address(tmp_path: Path, capsys):
    before = set(NodeNetwork.existing())
    code = main(
        [
            "run",
            "cpu-2node-1a1f",
            "--dry-run",
            "--json",
            "--node-network",
            "netns",
            "--root",
            str(ROOT),
            "--model-root",
            str(tmp_path),
        ]
    )
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    nodes = plan["nodes"]
    assert len(set(nodes.values())) == 2
    assert all(a.startswith("10.") for a in nodes.values())
    ffn = next(r for r in plan["roles"] if r["role"] == "ffn")
    attention = next(r for r in plan["roles"] if r["role"] == "attention")
    assert ffn["host"] == nodes["node-b"] == plan["afd_host"]
    assert attention["host"] == nodes["node-a"]
    # nothing was created by a dry run
    assert set(NodeNetwork.existing()) == before


def test_node_network_names_and_addresses_are_distinct_per_run() -> None:
    one = NodeNetwork("aaaa", ["node-a", "node-b"])
    two = NodeNetwork("bbbb", ["node-a", "node-b"])
    assert one.addresses["node-a"] != one.addresses["node-b"]
    assert set(one.namespaces.values()).isdisjoint(two.namespaces.values())
    assert len(one.bridge) <= 15  # IFNAMSIZ


def test_local_engine_loopback_puts_every_node_on_loopback() -> None:
    scenario = Catalogue.load(ROOT).get("cpu-2node-2a1f")
    assert LocalEngine("loopback").node_addresses(scenario) == {
        "node-a": "127.0.0.1",
        "node-b": "127.0.0.1",
    }


def test_ray_engine_without_a_cluster_refuses_clearly(tmp_path: Path, capsys):
    code = main(
        [
            "run",
            "cpu-2node-1a1f",
            "--engine",
            "ray",
            "--cluster-state",
            str(tmp_path / "none"),
            "--root",
            str(ROOT),
            "--model-root",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "--engine ray" in err and "nothing was started" in err


BROKEN = """\
placement:
  nodes:
    node-a: {}
    Node_B: {}
    node-c: {}
  attention:
    - {node: node-a, dp_local: 1}
    - {node: node-x, dp_local: 2}
  ffn: []
"""


def test_placement_errors_are_positioned_and_all_reported(tmp_path: Path, capsys):
    repo = make_repo(tmp_path / "repo")
    path = repo / "scenarios/cpu/cpu-bad-placement.yaml"
    path.write_text(
        "extends: cpu-eager-1a1f\ntopology:\n  attention: {dp: 2}\n" + BROKEN
    )
    assert main(["validate", "--root", str(repo), str(path)]) == 1
    err = capsys.readouterr().err
    for expected in (
        (
            "cpu-bad-placement.yaml:7:5: placement.nodes.Node_B: node name 'Node_B' "
            "must be a DNS label"
        ),
        (
            "cpu-bad-placement.yaml:11:8: placement.attention[1].node: no node named "
            "'node-x' under placement.nodes; known: Node_B, node-a, node-c"
        ),
        (
            "placement.attention: the attention servers run 3 DP ranks in all "
            "(sum of dp_local), but topology.attention.dp is 2"
        ),
        "placement.ffn: an AFD scenario with a placement places its ffn servers too",
        "placement.nodes.node-c: node 'node-c' runs no server",
    ):
        assert expected in err, (expected, err)


def test_device_rules_name_the_node_and_the_other_server(tmp_path: Path) -> None:
    data = json.loads(json.dumps(MULTI_NODE_CUDA))
    data["placement"]["attention"][1]["node"] = "attn-0"  # same devices twice
    data["placement"]["ffn"][0]["devices"] = [0, 1, 2]
    data["placement"]["nodes"].pop("attn-1")
    data["topology"]["ffn"]["devices"] = [0]
    repo = make_repo(tmp_path / "repo")
    path = repo / "scenarios/cuda/multi.yaml"
    path.write_text(json.dumps(data))
    cat = Catalogue.load(repo)
    errors = "\n".join(str(e) for e in cat.errors if "multi.yaml" in e.file)
    assert (
        "placement.attention[1].devices: device 0 of node 'attn-0' is already used "
        "by placement.attention[0]" in errors
    )
    assert "placement.ffn[0].devices: needs dp_local x tp = 8 x 1 = 8 devices" in errors
    assert "a TP group never spans nodes" in errors
    assert "topology.ffn.devices: with a placement, devices are listed per server" in (
        errors
    )


def test_a_port_the_os_hands_out_twice_is_not_given_twice(monkeypatch) -> None:
    # The OS may return a port again once the probing socket is closed.
    ports = iter([20000, 20000, 20001, 20001, 20002, 20003, 20004, 20005, 20006])
    monkeypatch.setattr(launch, "free_port", lambda: next(ports))
    plan = plan_of(Catalogue.load(ROOT).get("cpu-eager-2a1f"), baseline=True)
    given = [r.api_port for r in plan.roles] + [plan.afd_port]
    given += [
        int(arg(r.argv, "--data-parallel-rpc-port"))
        for r in plan.roles
        if "--data-parallel-rpc-port" in r.argv
    ]
    assert len(given) == len(set(given)) == 5


def test_cpu_dp_roles_run_the_model_in_their_engine_cores() -> None:
    cat = Catalogue.load(ROOT)
    plan = plan_of(cat.get("cpu-eager-2a1f"), baseline=True)
    by_role = {r.role: r.argv for r in plan.roles}
    assert arg(by_role["attention"], "--distributed-executor-backend") == "uni"
    for one_rank in ("ffn", "baseline"):
        assert "--distributed-executor-backend" not in by_role[one_rank]
    # hardware keeps vLLM's choice; a scenario naming an executor keeps its own
    cuda = plan_of(Scenario.model_validate(MULTI_NODE_CUDA), nodes=ADDRESSES)
    assert all("--distributed-executor-backend" not in r.argv for r in cuda.roles)
    own = cat.get("cpu-eager-2a1f").model_copy(deep=True)
    own.roles.attention.args.extend(["--distributed-executor-backend", "mp"])
    argv = plan_of(own).role("attention").argv
    assert argv.count("--distributed-executor-backend") == 1
    assert arg(argv, "--distributed-executor-backend") == "mp"
