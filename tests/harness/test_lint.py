# SPDX-License-Identifier: Apache-2.0
"""afd-e2e lint on broken copies of the repository: each message names the
file, the line and the fix (AFD-I12)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lint_repo import ROOT, edit, line_of, make_repo, pos

from afd_e2e.cli import main

READY = "ci/cuda/test-ready.yml"
MERGE = "ci/cuda/test-merge.yml"
WEEKLY = "ci/weekly.yml"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def lint(root: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str]:
    code = main(["lint", "--root", str(root), *extra])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def test_the_repository_itself_is_clean(capsys) -> None:
    code, out = lint(ROOT, capsys)
    assert code == 0, out
    assert "22 scenarios" in out or "scenarios" in out


def test_copy_is_clean(repo: Path, capsys) -> None:
    assert lint(repo, capsys) == (0, lint(repo, capsys)[1])
    assert lint(repo, capsys)[0] == 0


def remove_step(path: Path, scenario_id: str) -> int:
    """Drop the step that runs ``scenario_id``; return its label line."""
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if f"e2e {scenario_id} (" in line)
    end = start + 1
    while end < len(lines) and not lines[end].startswith("- "):
        end += 1
    path.write_text("".join(lines[:start] + lines[end:]))
    return start + 1


def test_asymmetric_pr_lists(repo: Path, capsys) -> None:
    remove_step(repo / MERGE, "afd-graph-2a2f")
    code, out = lint(repo, capsys)
    ready_line = line_of(repo / READY, "afd-e2e run afd-graph-2a2f ")
    assert code == 1
    assert f"{MERGE}:1: pr scenario 'afd-graph-2a2f' is in {READY}:{ready_line}" in out
    assert "add this step:" in out
    assert "command: afd-e2e run afd-graph-2a2f --model-root" in out


def test_list_names_a_missing_scenario(repo: Path, capsys) -> None:
    edit(repo / WEEKLY, "afd-e2e run afd-graph-2a1f ", "afd-e2e run afd-graph-2a1x ")
    code, out = lint(repo, capsys)
    line = line_of(repo / WEEKLY, "afd-graph-2a1x")
    assert code == 1
    assert (
        f"{WEEKLY}:{line}: 'afd-graph-2a1x' has no scenario file; remove the line"
        in out
    )
    # ... and the real scenario is now orphaned, with the step to add.
    assert "weekly scenario 'afd-graph-2a1f' is in no list; add this step" in out


def test_pr_scenario_in_no_list(repo: Path, capsys) -> None:
    remove_step(repo / READY, "afd-v2-eager-tp2")
    remove_step(repo / MERGE, "afd-v2-eager-tp2")
    code, out = lint(repo, capsys)
    assert code == 1
    assert (
        "scenarios/cuda/afd-v2-eager-tp2.yaml:1: pr scenario 'afd-v2-eager-tp2' is "
        f"in no PR list; add this step to {READY} and {MERGE}"
    ) in out


def test_2a1f_scenario_promoted_to_pr(repo: Path, capsys) -> None:
    path = repo / "scenarios/cuda/afd-graph-2a1f.yaml"
    edit(path, "tier: weekly", "tier: pr")
    code, out = lint(repo, capsys)
    line = line_of(path, "tier: pr")
    assert code == 1
    assert (
        f"scenarios/cuda/afd-graph-2a1f.yaml:{line}:1: tier: 2A1F scenarios are "
        "never pr; use weekly or local"
    ) in out


def test_local_scenario_in_a_pr_list_is_not_promoted(repo: Path, capsys) -> None:
    with (repo / READY).open("a") as fh:
        fh.write("- label: smoke\n  command: afd-e2e run afd-eager-2a1f\n")
    code, out = lint(repo, capsys)
    line = line_of(repo / READY, "afd-e2e run afd-eager-2a1f")
    assert code == 1
    assert (
        f"{READY}:{line}: 'afd-eager-2a1f' is tier local, which never runs in a "
        "pr list; remove the line 'afd-e2e run afd-eager-2a1f'"
    ) in out


def test_five_device_pr_case(repo: Path, capsys) -> None:
    path = repo / "scenarios/cuda/baseline-graph.yaml"
    edit(
        path,
        "dp: 4, tp: 1, ep: true, devices: [0, 1, 2, 3]",
        "dp: 5, tp: 1, ep: true, devices: [0, 1, 2, 3, 4]",
    )
    code, out = lint(repo, capsys)
    assert code == 1
    line = line_of(repo / "scenarios/cuda/afd-eager-2a2f.yaml", "tier: pr")
    assert (
        f"scenarios/cuda/afd-eager-2a2f.yaml:{line}:1: tier: a pr scenario uses at "
        "most 4 devices, this one uses 5; make it weekly or shrink the topology "
        "(inherited by 'baseline-graph' through extends)"
    ) in out


def test_dbo_with_eight_samples(repo: Path, capsys) -> None:
    path = repo / "scenarios/cuda/afd-graph-dbo-2a2f.yaml"
    edit(
        path,
        "samples: 200, threshold: 0.30, concurrency: 12",
        "samples: 8, threshold: 0.30, concurrency: 12",
    )
    code, out = lint(repo, capsys)
    where = pos(path, "samples: 8", "samples")
    assert code == 1
    assert (
        f"scenarios/cuda/afd-graph-dbo-2a2f.yaml:{where}: checks.gsm8k.samples: a "
        "DBO scenario needs >= 24 samples, got 8"
    ) in out


def test_lowered_threshold_in_a_command(repo: Path, capsys) -> None:
    edit(
        repo / READY,
        "command: afd-e2e run afd-graph-2a2f ",
        "command: AFD_GSM8K_THRESHOLD=0.1 afd-e2e run afd-graph-2a2f ",
    )
    code, out = lint(repo, capsys)
    line = line_of(repo / READY, "AFD_GSM8K_THRESHOLD=0.1")
    assert code == 1
    assert (
        f"{READY}:{line}: AFD_GSM8K_THRESHOLD=0.1 is below 'afd-graph-2a2f' "
        "threshold 0.3; remove it"
    ) in out


def test_limit_in_step_env(repo: Path, capsys) -> None:
    edit(
        repo / MERGE,
        "  command: afd-e2e run afd-eager-2a2f ",
        "  env: {AFD_GSM8K_LIMIT: '10'}\n  command: afd-e2e run afd-eager-2a2f ",
    )
    code, out = lint(repo, capsys)
    line = line_of(repo / MERGE, "command: afd-e2e run afd-eager-2a2f ")
    assert code == 1
    assert (
        f"{MERGE}:{line}: sets AFD_GSM8K_LIMIT; a gate runs every sample: remove" in out
    )


@pytest.mark.parametrize(
    "narrowing", ["-k dp2", "--deselect x", "-m 'not slow'", "--runxfail"]
)
def test_narrowed_selection_in_a_command(repo: Path, capsys, narrowing: str) -> None:
    edit(
        repo / READY,
        'afd-e2e run afd-v2-eager-dp2 --model-root "$$AFD_MODEL_ROOT"',
        f"pytest tests/e2e {narrowing} && afd-e2e run afd-v2-eager-dp2",
    )
    code, out = lint(repo, capsys)
    line = line_of(repo / READY, "afd-e2e run afd-v2-eager-dp2")
    assert code == 1
    assert (
        f"{READY}:{line}: '" in out and "narrows what the gate runs; remove it" in out
    )


def test_marker_scan_exception_on_a_cuda_case(repo: Path, capsys) -> None:
    path = repo / "scenarios/cuda/afd-eager-2a1f.yaml"
    with path.open("a") as fh:
        fh.write("teardown: {sigkill: marker-scan}\n")
    code, out = lint(repo, capsys)
    where = pos(path, "teardown:", "sigkill")
    assert code == 1
    assert (
        f"scenarios/cuda/afd-eager-2a1f.yaml:{where}: teardown.sigkill: the "
        "marker-scan exception is only for the NPU async-CAM scenarios"
    ) in out
    assert "use 'fail'" in out


def test_duplicate_yaml_key(repo: Path, capsys) -> None:
    path = repo / "scenarios/cpu/cpu-eager-1a1f.yaml"
    with path.open("a") as fh:
        fh.write("tier: weekly\n")
    code, out = lint(repo, capsys)
    first = line_of(path, "tier: local")
    last = len(path.read_text().splitlines())
    assert code == 1
    assert (
        f"scenarios/cpu/cpu-eager-1a1f.yaml:{last}:1: tier: duplicate key (first "
        f"defined on line {first}); keep one"
    ) in out


def test_unknown_field_and_wrong_types_reported_together(repo: Path, capsys) -> None:
    path = repo / "scenarios/cuda/afd-eager-2a2f.yaml"
    edit(
        path,
        "ffn: {dp: 2, tp: 1, ep: true, devices: [2, 3]}",
        "ffn: {dp: 2, tp: 1.5, ep: true, devices: [2, 3], gpus: 2}",
    )
    code, out = lint(repo, capsys)
    tp, gpus = pos(path, "gpus: 2", "tp:"), pos(path, "gpus: 2", "gpus")
    assert code == 1
    assert f"afd-eager-2a2f.yaml:{tp}: topology.ffn.tp: must be an integer" in out
    assert (
        f"afd-eager-2a2f.yaml:{gpus}: topology.ffn.gpus: unknown field; allowed "
        "fields: devices, dp, ep, standby, tp"
    ) in out


def test_plugin_validator_decides_for_scenarios(repo: Path, capsys) -> None:
    path = repo / "scenarios/cuda/afd-v2-graph-dp2.yaml"
    edit(path, "compute_gate_on_attention: false", "compute_gate_on_attention: true")
    code, out = lint(repo, capsys)
    line = line_of(path, "compute_gate_on_attention: true")
    assert code == 1
    assert (
        f"afd-v2-graph-dp2.yaml:{line}:1: compute_gate_on_attention: [attention role] "
        "must be false with model runner v2"
    ) in out


@pytest.mark.parametrize(
    "scenario", ["cpu-eager-1a1f-qwen3.5", "cpu-eager-2a1f-qwen3.5"]
)
def test_qwen3_5_with_the_gate_on_attention_is_refused(
    repo: Path, capsys, scenario: str
) -> None:
    """AFD-I7: Qwen3.5/3.6 MoE keeps its router gate on the FFN role; the
    harness refuses the scenario with the plugin's own validator, naming the
    file, line and field (it asks both roles and reports a message once;
    tests/unit/test_validation.py checks each role)."""
    path = repo / f"scenarios/cpu/{scenario}.yaml"
    text = path.read_text()
    path.write_text(text + "compute_gate_on_attention: true\n")
    code, out = lint(repo, capsys)
    line = line_of(path, "compute_gate_on_attention: true")
    assert code == 1
    assert (
        f"{scenario}.yaml:{line}:1: compute_gate_on_attention: [attention role] "
        "must be false for Qwen3.5 / Qwen3.6 MoE "
        "(Qwen3_5MoeForConditionalGeneration)"
    ) in out


def test_a_refused_serving_feature_in_role_args_fails_validate(
    repo: Path, capsys
) -> None:
    """The serving features AFD refuses are refused from the scenario's args,
    before anything starts, at the arg that turns them on."""
    path = repo / "scenarios/cpu/cpu-eager-1a1f.yaml"
    edit(path, "CPU_MLA]", "CPU_MLA, --enable-lora]")
    code = main(["validate", "--root", str(repo), str(path)])
    out = capsys.readouterr().err
    at = pos(path, "--enable-lora", "--enable-lora")
    assert code == 1
    assert (
        f"cpu-eager-1a1f.yaml:{at}: roles.common.args[9]: [attention role] "
        "--enable-lora is refused under AFD: adapters patch"
    ) in out


def test_a_model_this_build_cannot_split_fails_lint(repo: Path, capsys) -> None:
    """DeepSeek-V3.2 is in the DeepSeek family but has no role-split model in
    this build: the scenario would pass lint and die at model load."""
    path = repo / "scenarios/cuda/afd-eager-2a2f.yaml"
    arch = "architecture: {}ForCausalLM"
    edit(path, arch.format("DeepseekV2"), arch.format("DeepseekV32"))
    code, out = lint(repo, capsys)
    assert code == 1
    assert "afd-eager-2a2f.yaml:" in out
    family = "(DeepSeek-V2 / V3 / V3.2)"
    assert f"'DeepseekV32ForCausalLM' {family} is not in this build" in out
    assert "set awaits: <what is missing> until it lands" in out


def test_awaits_accepts_only_what_this_build_lacks(repo: Path, capsys) -> None:
    """A scenario that awaits its implementation is still checked against
    every rule; the mark itself must stay true."""
    path = repo / "scenarios/npu/npu-afd-eager-2a2f.yaml"
    gate = "compute_gate_on_attention: {}\ntopology"
    edit(path, gate.format("false"), gate.format("true"))
    code, out = lint(repo, capsys)
    assert code == 1
    assert "must be false for CAMP2pAFDConnector" in out
    assert "not in this build" not in out

    ready = repo / "scenarios/cuda/afd-eager-2a2f.yaml"
    edit(ready, "tier: pr\n", "tier: pr\nawaits: nothing really\n")
    code, out = lint(repo, capsys)
    assert (
        f"afd-eager-2a2f.yaml:{line_of(ready, 'awaits:')}:1: awaits: this build "
        "holds everything the scenario needs; remove awaits ('nothing really')"
    ) in out


def test_run_refuses_a_scenario_this_build_cannot_run(repo: Path, capsys) -> None:
    code = main(["run", "afd-dsv4-flash-async-cam-dp2tp4-ep8", "--root", str(repo)])
    err = capsys.readouterr().err
    assert code == 2
    assert "needs what is not in this build (it awaits a DeepSeek-V4 role" in err
    assert "'DeepseekV4ForCausalLM'" in err and "not in this build" in err
    assert "nothing was started" in err
    code = main(["run", "npu-afd-graph-2a2f", "--root", str(repo)])
    err = capsys.readouterr().err
    assert code == 2
    assert "(it awaits ACL graph capture in the Ascend role runners)" in err
    assert "graph mode 'FULL_DECODE_ONLY' needs it (run eager)" in err


def test_stale_generated_table(repo: Path, capsys) -> None:
    edit(
        repo / "scenarios/cuda/afd-graph-2a1f.yaml",
        "description: DeepSeek-V2-Lite AFD 2A1F",
        "description: renamed",
    )
    path = repo / "tests/e2e/README.md"
    edit(
        path, "| `afd-graph-2a1f` | cuda | weekly |", "| `afd-graph-2a1f` | cuda | pr |"
    )
    code, out = lint(repo, capsys)
    assert code == 1
    assert "tests/e2e/README.md:" in out
    assert (
        "generated block 'scenarios' is out of date; run `afd-e2e docs --write`" in out
    )


def test_extends_only_one_level(repo: Path, capsys) -> None:
    path = repo / "scenarios/cuda/afd-graph-2a2f.yaml"
    edit(path, "extends: afd-eager-2a2f", "extends: afd-graph-dbo-2a2f")
    code, out = lint(repo, capsys)
    assert code == 1
    assert (
        "scenarios/cuda/afd-graph-2a2f.yaml:1:1: extends: afd-graph-dbo-2a2f itself "
        "extends 'afd-eager-2a2f'; only one level of extends is allowed"
    ) in out


def test_buildkite_schema_violation(repo: Path, capsys) -> None:
    edit(repo / WEEKLY, "timeout_in_minutes: ", "timeout_in_minutes: soon #")
    schema = Path(os.environ.get("AFD_BUILDKITE_SCHEMA", "/nonexistent"))
    if not schema.exists():  # the schema is only on CI machines; use a minimal one
        schema = repo / "schema.json"
        schema.write_text(
            '{"type": "object", "required": ["steps"], "properties": '
            '{"steps": {"type": "array", "items": {"type": "object", '
            '"properties": {"timeout_in_minutes": {"type": "integer"}}}}}}'
        )
    code, out = lint(repo, capsys, "--buildkite-schema", str(schema))
    line = line_of(repo / WEEKLY, "timeout_in_minutes: soon")
    assert code == 1
    assert f"{WEEKLY}:{line}: Buildkite schema: steps.0.timeout_in_minutes:" in out


def test_render_restores_symmetry(repo: Path, capsys) -> None:
    remove_step(repo / MERGE, "afd-graph-2a2f")
    assert main(["ci", "render", "--root", str(repo), "--check"]) == 1
    assert main(["ci", "render", "--root", str(repo)]) == 0
    capsys.readouterr()
    assert lint(repo, capsys)[0] == 0
