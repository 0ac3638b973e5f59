# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e plan`` end to end: help, the planning page's worked example
(DeepSeek-V3 on H800), JSON, calibrated plans for a CPU scenario, the search's
promises, bad input, and imports without torch or vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.cli import main
from afd_e2e.plan.megascale import pipeline_time
from afd_e2e.plan.planner import PlanRequest, make_plan
from afd_e2e.plan.stages import RooflineModel, host_sharing

WORKED_EXAMPLE = [
    "plan",
    "--model",
    "deepseek-v3",
    "--hardware",
    "h800",
    "--context",
    "4096",
    "--tpot-ms",
    "50",
    "--kv-dtype",
    "fp8",
]


def test_help_documents_inputs_and_builtins(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for text in (
        "--calibration",
        "--trace",
        "--tpot-ms",
        "built-in models: deepseek-v3, step-3",
        "cpu-2core",
        "batch,attention_s,ffn_s,exchange_s",
    ):
        assert text in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "plan" in capsys.readouterr().out


def test_worked_example_deepseek_v3_on_h800(capsys: pytest.CaptureFixture) -> None:
    # DeepSeek-V3 (61 layers, 256 experts top-8 + 1 shared, MLA 576) on 8 x H800
    # servers at Step-3 Table 8's DSv3 setting: 4K context, 50 ms TPOT, 8-bit KV.
    assert main(WORKED_EXAMPLE) == 0
    out = capsys.readouterr().out
    assert "recommended: 4A2F, 3 micro-batches of 1303 sequences" in out
    assert "8655 tokens/s per device on 48 devices, bound by kv-memory" in out
    # One FFN instance cannot hold 671B of FP8 weights on 8 x 80 GB.
    assert "rejected: 64 ffn-memory" in out
    # Step-3's verdict: DSv3 (S = 0.035) is sparser than H800 tolerates (0.058).
    assert "minimum sparsity for this hardware: 0.0581" in out
    assert "the model is below it" in out
    # MegaScale-Infer's rule asks for 4 micro-batches; 3 wins with bubbles.
    assert "m >= 2 (1 + T_c / T_f) -> 4; chosen m = 3" in out
    assert "r* = 2.48 (ffn-bound)" in out


def test_the_readme_quotes_the_worked_example_as_it_runs(
    capsys: pytest.CaptureFixture,
) -> None:
    """The planning page's example is this command's output, not a retyped copy."""
    assert main(WORKED_EXAMPLE) == 0
    out = capsys.readouterr().out.rstrip()
    page = (ROOT / "docs" / "planning.md").read_text()
    command = "$ afd-e2e " + " ".join(WORKED_EXAMPLE) + "\n"
    assert command in page, "docs/planning.md lost its worked example of afd-e2e plan"
    quoted = page.split(command, 1)[1].split("\n```", 1)[0]
    assert quoted == out, "docs/planning.md's plan example is stale: rerun and paste"


def test_worked_example_as_json(capsys: pytest.CaptureFixture) -> None:
    assert main([*WORKED_EXAMPLE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = doc["recommended"]
    assert (
        best["plan"],
        best["micro_batches"],
        best["batch_per_attention_instance"],
    ) == (
        "4A2F",
        3,
        1303,
    )
    assert doc["candidates"][0] == best
    rates = [c["tokens_per_s_per_device"] for c in doc["candidates"]]
    assert rates == sorted(rates, reverse=True)
    assert doc["hardware"]["name"] == "H800"
    assert doc["step3"]["min_sparsity"] == pytest.approx(0.0581, abs=1e-4)
    assert doc["megascale_infer"]["min_micro_batches"] == 4


def test_every_plan_meets_the_target_with_the_largest_batch() -> None:
    report = make_plan(
        PlanRequest(
            model="step-3",
            hardware="h20",
            context=8192,
            tpot_ms=50,
            kv_dtype="fp8",
            max_attention=6,
            max_ffn=3,
        )
    )
    result = report.result
    assert result.candidates
    model_layers = report.shape.num_layers
    model = RooflineModel.build(report.shape, report.profile, "fp8", "fp8")
    for c in result.candidates:
        assert c.tpot_s <= 0.050
        if c.binding.startswith("tpot"):
            bigger = model.times(c.attention, c.ffn, c.batch + 1, 8192)
            assert pipeline_time(bigger, c.micro_batches, model_layers) > 0.050
    best = result.recommended
    assert best is not None
    assert best.tokens_per_device == max(c.tokens_per_device for c in result.candidates)


def _calibration(tmp_path: Path, ffn_slope: float) -> Path:
    rows = [
        "# 1A1F on the CPU, seconds per layer and micro-batch",
        "batch,attention_s,ffn_s,exchange_s",
    ]
    for b in (1, 8, 32):
        rows.append(f"{b},{2e-4 + 4e-5 * b},{5e-4 + ffn_slope * b},{1e-4 + 1e-6 * b}")
    path = tmp_path / f"cal-{ffn_slope}.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_calibrated_plan_for_a_cpu_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # CPU instances with cores of their own (cpu-2core shares one machine's).
    own_cores = tmp_path / "cpu-own-cores.yaml"
    own_cores.write_text(
        "schema_version: 1\nname: cpu-own-cores\n"
        "sources: ['none: stage times from --calibration']\n"
    )
    base = [
        "plan",
        "--model",
        "cpu-eager-1a1f",
        "--root",
        str(ROOT),
        "--hardware",
        str(own_cores),
        "--context",
        "512",
        "--tpot-ms",
        "20",
        "--max-attention",
        "4",
        "--max-ffn",
        "2",
        "--json",
    ]
    assert main([*base, "--calibration", str(_calibration(tmp_path, 1e-5))]) == 0
    fast_ffn = json.loads(capsys.readouterr().out)["recommended"]
    stages = fast_ffn["stage_times_s"]
    batch = fast_ffn["batch_per_attention_instance"]
    assert stages["attention"] == pytest.approx(2e-4 + 4e-5 * batch)
    assert fast_ffn["plan"] == "3A1F"
    # An FFN four times slower per token takes fewer attention instances per FFN.
    assert main([*base, "--calibration", str(_calibration(tmp_path, 4e-5))]) == 0
    slow_ffn = json.loads(capsys.readouterr().out)["recommended"]
    ratio = slow_ffn["attention_instances"] / slow_ffn["ffn_instances"]
    assert ratio < 3


def test_instances_sharing_one_machine_slow_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """cpu-2core: every instance on one 2-core machine. Two instances (the
    1A1F the calibration is measured on) run as measured; each instance more
    slows every stage by processor sharing, (A + F) / 2 over 1A1F's 1."""
    calibration = str(_calibration(tmp_path, 1e-5))
    per_instance: dict[str, dict] = {}
    for shape in ("1:1", "2:1", "3:1", "2:2"):
        args = ["plan", "--model", "cpu-eager-1a1f", "--root", str(ROOT)]
        args += ["--hardware", "cpu-2core", "--calibration", calibration]
        args += ["--context", "512", "--evaluate", shape, "--batch", "4", "--json"]
        assert main(args) == 0
        per_instance[shape] = json.loads(capsys.readouterr().out)["recommended"]
    alone = per_instance["1:1"]["stage_times_s"]
    assert alone["attention"] == pytest.approx(2e-4 + 4e-5 * 4)  # as measured
    for shape, slow in (("2:1", 1.5), ("3:1", 2.0), ("2:2", 2.0)):
        stages = per_instance[shape]["stage_times_s"]
        assert stages["attention"] == pytest.approx(alone["attention"] * slow)
    # the FFN of 2A1F computes both instances' 8 tokens, at 3/2 the time
    ffn = per_instance["2:1"]["stage_times_s"]["ffn"]
    assert ffn == pytest.approx((5e-4 + 1e-5 * 8) * 1.5)


def test_host_sharing_is_one_without_a_shared_host() -> None:
    assert host_sharing(9, None) == 1.0
    assert host_sharing(2, 2) == 1.0 and host_sharing(1, 2) == 1.0
    assert host_sharing(3, 2) == 1.5
    assert host_sharing(8, 4) == 2.0  # calibration's two fit on four cores


def test_cpu_profile_without_calibration_is_refused(
    capsys: pytest.CaptureFixture,
) -> None:
    code = main(
        ["plan", "--model", "step-3", "--hardware", "cpu-2core", "--context", "1"]
    )
    assert code == 2
    assert "pass --calibration FILE" in capsys.readouterr().err


def test_bad_inputs_are_all_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = main(
        [
            "plan",
            "--model",
            "no-such-model",
            "--hardware",
            "tpu-v9",
            "--context",
            "-5",
            "--tpot-ms",
            "0",
            "--calibration",
            str(tmp_path / "missing.csv"),
            "--max-ffn",
            "0",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    for text in (
        "'no-such-model' is not a built-in model",
        "no built-in profile or file 'tpu-v9'",
        "--context must be positive",
        "--tpot-ms must be positive",
        "--calibration: no such file",
        "--max-ffn must be at least 1",
    ):
        assert text in err


def test_no_feasible_plan_exits_one(capsys: pytest.CaptureFixture) -> None:
    code = main(
        [
            "plan",
            "--model",
            "deepseek-v3",
            "--hardware",
            "a800",
            "--context",
            "4096",
            "--max-ffn",
            "1",
            "--max-attention",
            "1",
        ]
    )
    assert code == 1
    captured = capsys.readouterr()
    assert "recommended: none" in captured.out
    assert "no plan meets" in captured.err


def test_trace_sets_the_context(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([{"prompt_tokens": 4000, "decode_tokens": 193}]))
    assert (
        main(
            [
                "plan",
                "--model",
                "step-3",
                "--hardware",
                "h800",
                "--trace",
                str(trace),
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["workload"]["context"] == pytest.approx(4000 + 192 / 2)
    assert "theta of 1 request " in doc["workload"]["source"]


PLAN_MODULES = [
    "afd_e2e.commands.plan",
    "afd_e2e.plan.analysis",
    "afd_e2e.plan.builtin_models",
    "afd_e2e.plan.calibration",
    "afd_e2e.plan.capacity",
    "afd_e2e.plan.megascale",
    "afd_e2e.plan.planner",
    "afd_e2e.plan.profiles",
    "afd_e2e.plan.provisioning",
    "afd_e2e.plan.report",
    "afd_e2e.plan.routing",
    "afd_e2e.plan.rows",
    "afd_e2e.plan.scenario_shapes",
    "afd_e2e.plan.search",
    "afd_e2e.plan.shapes",
    "afd_e2e.plan.stages",
    "afd_e2e.plan.step3",
    "afd_e2e.plan.types",
    "afd_e2e.plan.workload",
]


def test_plan_runs_with_torch_and_vllm_poisoned() -> None:
    package = ROOT / "harness" / "afd_e2e" / "plan"
    on_disk = {f"afd_e2e.plan.{p.stem}" for p in package.glob("*.py")} - {
        "afd_e2e.plan.__init__"
    }
    assert on_disk == {m for m in PLAN_MODULES if m.startswith("afd_e2e.plan.")}
    code = (
        "import sys, importlib\n"
        "for n in ('torch', 'vllm', 'torch_npu', 'vllm_ascend'):\n"
        "    sys.modules[n] = None\n"
        f"for m in {PLAN_MODULES!r}: importlib.import_module(m)\n"
        "from afd_e2e.cli import main\n"
        f"rc = main({WORKED_EXAMPLE!r} + ['--json'])\n"
        "assert rc == 0, rc\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm')"
        " and sys.modules[m] is not None]\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["recommended"]["plan"] == "4A2F"
