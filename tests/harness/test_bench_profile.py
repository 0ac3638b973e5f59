# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e bench --profile`` without servers: the AFD_STEP_TIMING lines of
a window (as the roles log them) become one calibration row per layer, the
file it writes is one ``afd-e2e plan --calibration`` fits, the server
counters it reads, and what it refuses. The real run is
tests/e2e/test_bench_profile.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.bench.decode_load import parse_metrics, prompt_ids
from afd_e2e.bench.profile import (
    calibration_csv,
    count_lines,
    derive_row,
    mean_parts,
    model_layers,
    row_problems,
    timing_lines,
)
from afd_e2e.bench.profile_options import ProfileOptions
from afd_e2e.cli import main
from afd_e2e.plan.calibration import load_calibration
from afd_plugin.step_timing import format_line

PREFIX = "(EngineCore pid=7722) INFO 12-06 08:58:53 [step_timing.py:94] "


def attention_line(steps: int, **ms: float) -> str:
    """An attention role's line as it reaches the log: vLLM's prefix, then
    the plugin's own formatting (parts in seconds over the window)."""
    step_s = sum(ms.values()) * steps / 1e3
    parts = {k: v * steps / 1e3 for k, v in ms.items()}
    return PREFIX + format_line("attention", steps, step_s, parts)


def ffn_line(steps: int, **ms: float) -> str:
    step_s = sum(ms.values()) * steps / 1e3
    return PREFIX + format_line(
        "ffn", steps, step_s, {k: v * steps / 1e3 for k, v in ms.items()}
    )


ATTENTION_MS = {
    "between": 0.5,
    "runner": 2.0,
    "announce": 0.3,
    "send": 0.4,
    "wait": 3.2,
    "compute": 4.6,
}
FFN_MS = {"control": 3.8, "recv": 4.6, "compute": 2.4, "send": 0.2}


def test_timing_lines_are_read_from_a_role_log_among_other_lines() -> None:
    log = "\n".join(
        [
            "(APIServer pid=1) INFO ... Avg prompt throughput: 5.9 tokens/s",
            attention_line(16, **ATTENTION_MS),
            'INFO:     127.0.0.1:43944 - "POST /v1/completions HTTP/1.1" 200 OK',
            ffn_line(16, **FFN_MS),
        ]
    )
    lines = timing_lines(log)
    assert [t["role"] for t in lines] == ["attention", "ffn"]
    assert lines[0]["steps"] == 16
    assert lines[0]["wait"] == pytest.approx(3.2)
    assert lines[0]["step_ms"] == pytest.approx(sum(ATTENTION_MS.values()))
    assert count_lines(log, "attention") == 1
    assert count_lines(log, "ffn") == 1


def test_windows_are_averaged_per_step_weighted_by_their_steps() -> None:
    lines = timing_lines(
        "\n".join(
            [
                attention_line(10, **{**ATTENTION_MS, "compute": 2.0}),
                attention_line(30, **{**ATTENTION_MS, "compute": 6.0}),
                ffn_line(16, **FFN_MS),
            ]
        )
    )
    means = mean_parts(lines, "attention")
    assert means["compute"] == pytest.approx((10 * 2.0 + 30 * 6.0) / 40)
    assert means["steps"] == 40
    with pytest.raises(ValueError, match="no AFD_STEP_TIMING line of the ffn role"):
        mean_parts(lines[:2], "ffn")


def test_a_row_splits_the_attention_step_into_its_three_stages_per_layer() -> None:
    layers = 3
    row = derive_row(7.9, ATTENTION_MS, FFN_MS, layers, context=190.0)
    own = 0.5 + 2.0 + 0.3 + 4.6  # between + runner + announce + compute
    assert row.attention_s == pytest.approx(own / layers / 1e3)
    assert row.ffn_s == pytest.approx(2.4 / layers / 1e3)
    # The round trip (send + wait) less the FFN compute inside it.
    assert row.exchange_s == pytest.approx((0.4 + 3.2 - 2.4) / layers / 1e3)
    # The planner's one-micro-batch iteration, L x the stages, is the step.
    step_ms = sum(ATTENTION_MS.values())
    total = (row.attention_s + row.ffn_s + row.exchange_s) * layers * 1e3
    assert total == pytest.approx(step_ms)
    assert (row.batch, row.context) == (7.9, 190.0)
    assert row_problems(row, 8) == []


def test_a_window_whose_ffn_outlasts_the_round_trip_is_reported() -> None:
    row = derive_row(4.0, ATTENTION_MS, {**FFN_MS, "compute": 5.0}, 3)
    assert row.exchange_s < 0
    (problem,) = row_problems(row, 4)
    assert problem.startswith("concurrency 4 (batch 4.00): exchange_s")
    assert "windows disagree" in problem


def test_a_window_missing_a_part_is_refused() -> None:
    partial = {k: v for k, v in ATTENTION_MS.items() if k != "wait"}
    with pytest.raises(ValueError, match=r"attention\.wait"):
        derive_row(1.0, partial, FFN_MS, 3)
    with pytest.raises(ValueError, match="layers must be at least 1"):
        derive_row(1.0, ATTENTION_MS, FFN_MS, 0)


def test_the_file_written_is_one_the_planner_fits(tmp_path: Path) -> None:
    rows = [
        derive_row(
            b,
            {**ATTENTION_MS, "compute": 4.0 + 0.5 * b},
            {**FFN_MS, "compute": 2.4 + 0.05 * b},
            3,
            context=190.0 + b,
        )
        for b in (1.0, 4.0, 16.0)
    ]
    path = tmp_path / "calibration.csv"
    path.write_text(calibration_csv(rows, ["afd-e2e bench cpu-eager-1a1f --profile"]))
    text = path.read_text()
    assert text.splitlines()[0] == "# afd-e2e bench cpu-eager-1a1f --profile"
    assert "batch,attention_s,ffn_s,exchange_s\n" in text
    assert "# batch 16.000: mean context 206 tokens per sequence" in text
    fits = load_calibration(path)
    assert fits.rows == 3 and not fits.attention_per_token
    # Attention grows 0.5 ms per step per sequence; the FFN 0.05 ms.
    assert fits.attention.slope == pytest.approx(0.5e-3 / 3, rel=1e-5)
    assert fits.ffn.slope == pytest.approx(0.05e-3 / 3, rel=1e-5)
    assert fits.ffn.intercept == pytest.approx(2.4e-3 / 3, rel=1e-5)


def test_layers_come_from_the_models_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 3}))
    assert model_layers(tmp_path) == 3
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ValueError, match="num_hidden_layers"):
        model_layers(tmp_path)


METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:generation_tokens_total{engine="0",model_name="m"} 1200.0
vllm:generation_tokens_total{engine="1",model_name="m"} 300.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 310.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 1700.0
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 12.0
vllm:num_preemptions_total{engine="0",model_name="m"} 0.0
"""


def test_server_counters_are_summed_over_engines() -> None:
    counters = parse_metrics(METRICS)
    assert counters["generation_tokens"] == 1500.0
    assert counters["steps"] == 310.0  # not the histogram's buckets
    assert counters["running"] == 4.0
    with pytest.raises(ValueError, match="vllm:num_preemptions_total"):
        parse_metrics(METRICS.replace("vllm:num_preemptions_total", "other"))


def test_prompts_have_the_asked_length_and_differ() -> None:
    prompts = prompt_ids(4, 128, 512, seed=3)
    assert [len(p) for p in prompts] == [128] * 4
    assert len({tuple(p) for p in prompts}) == 4
    assert all(8 <= t < 512 for p in prompts for t in p)
    assert prompts == prompt_ids(4, 128, 512, seed=3)


def test_streams_outlast_the_window() -> None:
    options = ProfileOptions(timing_window=16, windows=4)
    awaited = (2 + 4) * 16  # settling and measured lines
    assert options.max_tokens > awaited + 16


def test_bad_profile_options_are_all_reported(capsys: pytest.CaptureFixture) -> None:
    code = main(
        [
            "bench",
            "--root",
            str(ROOT),
            "--profile",
            "--concurrency",
            "4",
            "--timing-window",
            "0",
            "--output-len",
            "8",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "--concurrency: --profile needs two or more different values" in err
    assert "--timing-window: must be >= 1, got 0" in err
    assert "--output-len: does not apply to --profile" in err


@pytest.mark.parametrize(
    ("scenario", "why"),
    [
        ("cpu-eager-2a1f", "runs 2A1F; a calibration is measured on 1A1F"),
        ("cpu-eager-1a1f-camasync", "has no control plane"),
    ],
)
def test_profile_calibrates_one_a_one_f_only(
    scenario: str, why: str, capsys: pytest.CaptureFixture
) -> None:
    assert main(["bench", "--root", str(ROOT), scenario, "--profile"]) == 2
    err = capsys.readouterr().err
    assert why in err and "nothing was started" in err


def test_a_window_takes_exactly_the_timing_lines_it_asked_for(tmp_path: Path) -> None:
    """A slow poll may find more lines waiting than the window needs: the
    window still ends after the asked-for line, the rest stays for later."""
    from afd_e2e.bench.profile_run import _LogTail

    log = tmp_path / "attention-0.log"
    log.write_text("")
    tail = _LogTail(log)

    def timing(n: int) -> str:
        return f"x AFD_STEP_TIMING role=attention steps=8 step_ms={n}.0 wait=1.0\n"

    log.write_text(
        "vLLM chatter\n" + timing(1) + "ffn line\n" + timing(2) + timing(3) + "AFD_ST"
    )
    assert tail.take("attention", 2) == 2
    assert tail.text(0, tail.pos).count("role=attention") == 2
    assert tail.take("attention", 5) == 1  # the third; the partial line waits
    assert tail.text(0, tail.pos).endswith(timing(3))
