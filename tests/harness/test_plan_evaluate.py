# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e plan --evaluate A:F --batch B``: predict one given deployment
(what benchmarks/plan_vs_measured.py compares with measurements) instead of
searching, from the same stage model and pipeline as the search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.cli import main
from afd_e2e.plan.megascale import pipeline_time
from afd_e2e.plan.planner import PlanRequest, make_plan
from afd_e2e.plan.types import StageTimes

LAYERS = 3  # the tiny DeepSeek-V2 of cpu-eager-1a1f


def _calibration(tmp_path: Path) -> Path:
    rows = ["batch,attention_s,ffn_s,exchange_s"]
    for b in (1, 4, 16):
        rows.append(f"{b},{2e-3 + 2e-4 * b},{8e-4 + 2e-5 * b},{2e-4 + 1e-5 * b}")
    path = tmp_path / "calibration.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _plan(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "plan",
        "--model",
        "cpu-eager-1a1f",
        "--root",
        str(ROOT),
        "--hardware",
        "cpu-2core",
        "--calibration",
        str(_calibration(tmp_path)),
        "--context",
        "160",
        "--micro-batches",
        "1",
        *extra,
    ]


def test_evaluate_predicts_exactly_the_given_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = _plan(tmp_path, "--evaluate", "2:1", "--batch", "8", "--json")
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    (only,) = doc["candidates"]
    assert only == doc["recommended"]
    assert (only["plan"], only["batch_per_attention_instance"]) == ("2A1F", 8)
    assert only["binding"] == "fixed-batch"
    assert doc["search"] == {
        "attention_instances": [2, 2],
        "ffn_instances": [1, 1],
        "micro_batches": [1],
        "fixed_batch": 8,
    }
    # Each attention instance holds 8 sequences; the FFN computes both: 16.
    # cpu-2core puts the three instances on two shared cores: each stage is
    # 3/2 of its 1A1F time.
    slow = 1.5
    attention = (2e-3 + 2e-4 * 8) * slow
    ffn = (8e-4 + 2e-5 * 16) * slow
    exchange = (2e-4 + 1e-5 * 16) * slow
    stages = StageTimes(attention, exchange / 2, ffn, exchange / 2)
    assert only["tpot_s"] == pytest.approx(pipeline_time(stages, 1, LAYERS))
    assert only["tpot_s"] == pytest.approx(LAYERS * (attention + ffn + exchange))
    assert only["tokens_per_s"] == pytest.approx(16 / only["tpot_s"])
    assert only["tokens_per_s_per_device"] == pytest.approx(16 / only["tpot_s"] / 3)


def test_a_fixed_batch_is_kept_even_past_the_tpot_target(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = _plan(tmp_path, "--evaluate", "1A1F", "--batch", "16", "--tpot-ms", "10")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "evaluated: only 1A1F" in out
    assert "batch: 16 per attention instance and micro-batch (--batch)" in out
    row = next(line for line in out.splitlines() if line.startswith("1A1F"))
    assert row.split()[-1] == "fixed-batch"
    assert float(row.split()[5]) == pytest.approx(20.0, abs=0.05)  # TPOT ms


def test_evaluate_without_batch_searches_that_deployment_only(
    tmp_path: Path,
) -> None:
    request = PlanRequest(
        model="cpu-eager-1a1f",
        hardware="cpu-2core",
        context=160,
        tpot_ms=30,
        calibration=_calibration(tmp_path),
        evaluate=(3, 1),
        micro_batches=(1,),
        root=ROOT,
    )
    (best,) = make_plan(request).result.candidates
    assert (best.attention, best.ffn) == (3, 1)
    assert best.tpot_s <= 0.030 and best.binding.startswith("tpot")


def test_bad_evaluate_and_batch_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(_plan(tmp_path, "--batch", "0")) == 2
    assert "--batch must be between 1 and --max-batch" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(_plan(tmp_path, "--evaluate", "2x1"))
    assert exit_info.value.code == 2
    assert "expected attention:ffn instances such as 2:1" in capsys.readouterr().err
