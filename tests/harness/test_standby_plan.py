# SPDX-License-Identifier: Apache-2.0
"""Standby FFN servers in scenarios, launch plans and the linter: where they
run, what they are told, and the refusals that name the line to edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lint_repo import ROOT, edit, make_repo, pos

from afd_e2e.cli import main
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.launch.plan import LaunchPlan, RoleLaunch, build_plan, describe

CATALOGUE = Catalogue.load(ROOT)
ONE_NODE = "scenarios/cpu/cpu-eager-1a1f-failover.yaml"


def plan_of(sid: str, tmp_path: Path, **kwargs: object) -> LaunchPlan:
    return build_plan(sid, CATALOGUE.get(sid), model_root=tmp_path, **kwargs)


def afd_of(launch: RoleLaunch) -> dict:
    return json.loads(launch.argv[launch.argv.index("--additional-config") + 1])["afd"]


def flag(launch: RoleLaunch, name: str) -> str:
    return launch.argv[launch.argv.index(name) + 1]


def test_standbys_start_after_the_ffn_server_with_its_args(tmp_path: Path) -> None:
    plan = plan_of("cpu-eager-1a1f-failover-twice", tmp_path, cpus=8)
    assert [r.name for r in plan.roles] == [
        "baseline-0",
        "ffn-0",
        "standby-0",
        "standby-1",
        "attention-0",
    ]
    ffn = plan.role("ffn")
    assert ffn is not None
    ports = [r.api_port for r in plan.roles]
    assert len(set(ports)) == len(ports)  # each standby has its own API
    for rank in (0, 1):
        standby = plan.roles[2 + rank]
        assert (standby.role, standby.rank, standby.headless) == (
            "standby",
            rank,
            False,
        )
        assert flag(standby, "--data-parallel-size") == "1"
        assert flag(standby, "--tensor-parallel-size") == "1"
        afd = afd_of(standby)
        assert afd == {**afd_of(ffn), "standby": True}
        assert afd["role"] == "ffn" and afd["num_ffn_standby"] == 2
        # the FFN role's args (its own port and afd config), its own marker
        cut = ffn.argv.index("--additional-config") + 2
        assert standby.argv[cut:] == ffn.argv[cut:]
        assert "--enforce-eager" in standby.argv
        assert standby.env["AFD_E2E_PROCESS_ROLE"] == f"standby:{rank}"
        assert standby.env["VLLM_PLUGINS"] == "afd_env,afd"
    attention = plan.role("attention")
    assert attention is not None and afd_of(attention)["num_ffn_standby"] == 2


def test_threads_a_standby_takes_no_share(tmp_path: Path) -> None:
    """A waiting standby idles and a promoted one replaces a dead rank: it
    gets the FFN rank's threads, and the others keep theirs."""
    plain = plan_of("cpu-eager-1a1f-qwen3", tmp_path, cpus=8)
    standby = plan_of("cpu-eager-1a1f-failover-twice", tmp_path, cpus=8)
    threads = {r.name: r.env["OMP_NUM_THREADS"] for r in standby.roles}
    assert threads == {
        "baseline-0": "4",
        "ffn-0": "4",
        "standby-0": "4",
        "standby-1": "4",
        "attention-0": "4",
    }
    assert {r.name: r.env["OMP_NUM_THREADS"] for r in plain.roles} == {
        n: t for n, t in threads.items() if not n.startswith("standby")
    }


def test_without_standbys_the_afd_config_is_unchanged(tmp_path: Path) -> None:
    plan = plan_of("cpu-eager-1a1f", tmp_path)
    for launch in plan.roles[1:]:
        afd = afd_of(launch)
        assert "num_ffn_standby" not in afd and "standby" not in afd
    assert [r.role for r in plan.roles] == ["baseline", "ffn", "attention"]


def test_with_standbys_attention_0_hosts_the_rendezvous(tmp_path: Path) -> None:
    nodes = {"node-a": "10.0.0.1", "node-b": "10.0.0.2"}
    plan = plan_of("cpu-2node-1a1f-failover", tmp_path, nodes=nodes)
    assert plan.afd_host == "10.0.0.1"  # node-a: attention, not the FFN node
    by_name = {r.name: r for r in plan.roles}
    assert by_name["standby-0"].node == "node-b"
    assert by_name["standby-0"].host == "10.0.0.2"
    for name in ("ffn-0", "standby-0", "attention-0"):
        assert afd_of(by_name[name])["host"] == "10.0.0.1"
    before = plan_of("cpu-2node-1a1f", tmp_path, nodes=nodes)
    assert before.afd_host == "10.0.0.2"  # no standby: the FFN node, as before
    text = describe(plan)
    assert "[standby-0] node node-b  api http://10.0.0.2:" in text
    assert "start order: baseline-0 -> ffn-0 -> standby-0 -> attention-0" in text


def test_a_standby_defaults_to_the_ffn_node(tmp_path: Path) -> None:
    scenario = CATALOGUE.get("cpu-2node-1a1f-failover")
    assert scenario.placement is not None
    placement = scenario.placement.model_copy(update={"standby": []})
    moved = scenario.model_copy(update={"placement": placement})
    plan = build_plan("x", moved, model_root=tmp_path)
    standby = next(r for r in plan.roles if r.role == "standby")
    assert standby.node == scenario.placement.ffn[0].node


def test_failover_without_parity_still_plans_the_reference(tmp_path: Path) -> None:
    scenario = CATALOGUE.get("cpu-eager-1a1f-failover")
    checks = scenario.checks.model_copy(update={"parity": None})
    plan = build_plan(
        "x", scenario.model_copy(update={"checks": checks}), model_root=tmp_path
    )
    assert plan.roles[0].role == "baseline"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def lint(root: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    code = main(["lint", "--root", str(root)])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def test_lint_refuses_standbys_on_a_connector_that_cannot_fail_over(
    repo: Path, capsys
) -> None:
    path = repo / "scenarios/cpu/cpu-eager-1a1f-camp2p.yaml"
    text = path.read_text()
    path.write_text(text + "topology:\n  ffn: {dp: 1, tp: 1, standby: 1}\n")
    code, out = lint(repo, capsys)
    assert code == 1
    where = pos(path, "standby: 1", "standby")
    assert (
        f"scenarios/cpu/cpu-eager-1a1f-camp2p.yaml:{where}: topology.ffn.standby: "
        "standby FFN servers need a connector that fails over "
        "(P2pGlooAFDConnector); connector is CAMP2pAFDConnector, so standby must "
        "be 0, got 1"
    ) in out


def test_lint_refuses_more_kills_than_standbys(repo: Path, capsys) -> None:
    path = repo / ONE_NODE
    edit(path, "kills: 1, expect: complete", "kills: 2, expect: complete")
    code, out = lint(repo, capsys)
    assert code == 1
    assert (
        f"{ONE_NODE}:{pos(path, 'kills: 2', 'kills')}: checks.ffn_failover.kills: "
        "2 kill(s) that must fail over need as many standbys, but "
        "topology.ffn.standby is 1; allowed kills: 1..1, or expect: fail with "
        "kills: 2"
    ) in out


def test_lint_refuses_a_failure_expected_while_a_standby_is_left(
    repo: Path, capsys
) -> None:
    path = repo / ONE_NODE
    edit(path, "kills: 1, expect: complete", "kills: 1, expect: fail")
    code, out = lint(repo, capsys)
    assert code == 1
    assert (
        f"{ONE_NODE}:{pos(path, 'kills: 1', 'kills')}: checks.ffn_failover.kills: "
        "expect: fail means the last kill finds no standby: kills must be "
        "topology.ffn.standby + 1 = 2, got 1"
    ) in out


def test_lint_refuses_a_standby_placed_on_an_unknown_node(repo: Path, capsys) -> None:
    path = repo / "scenarios/cpu/cpu-2node-1a1f-failover.yaml"
    edit(path, "  standby:\n    - {node: node-b}", "  standby:\n    - {node: node-c}")
    code, out = lint(repo, capsys)
    assert code == 1
    assert (
        f"cpu-2node-1a1f-failover.yaml:{pos(path, 'node-c', 'node:')}: "
        "placement.standby[0].node: no node named 'node-c' under "
        "placement.nodes; known: node-a, node-b"
    ) in out


def test_lint_refuses_a_negative_standby_count(repo: Path, capsys) -> None:
    path = repo / ONE_NODE
    edit(path, "standby: 1}", "standby: -1}")
    code, out = lint(repo, capsys)
    assert code == 1
    where = pos(path, "standby: -1", "standby")
    assert (
        f"{ONE_NODE}:{where}: topology.ffn.standby: must be greater than or equal "
        "to 0, got -1"
    ) in out
