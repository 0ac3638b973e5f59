# SPDX-License-Identifier: Apache-2.0
"""The GSM8K gate's rules without running lm-eval: refusals, data, verdicts.

CI overrides (AFD-I12), DBO floors, data layouts and errors, the PASS/FAIL line.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import GATE_ENV, FakeOpenAI, make_dataset, make_items, write_jsonl

from afd_e2e import cli
from afd_e2e.checks.gsm8k import Gsm8kRequest, completions_url, lmeval, run_gsm8k
from afd_e2e.checks.gsm8k.data import Gsm8kDataError, resolve_data
from afd_e2e.checks.gsm8k.gate import Refused, env_overrides, format_pair, judge
from afd_e2e.checks.gsm8k.protocol import CHILD_MODULE


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in GATE_ENV:
        monkeypatch.delenv(name, raising=False)


def _request(data: Path, url: str, tmp_path: Path, **kw: object) -> Gsm8kRequest:
    fields: dict[str, object] = {
        "base_url": url,
        "model": "m",
        "samples": 4,
        "threshold": 0.5,
        "fewshot": 0,
        "data": data,
        "out_dir": tmp_path / "out",
    }
    fields.update(kw)
    return Gsm8kRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("ci_var", ["CI", "BUILDKITE"])
def test_ci_refuses_the_limit_env_before_sending_anything(
    ci_var: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ci_var, "true")
    monkeypatch.setenv("AFD_GSM8K_LIMIT", "2")
    data, answers = make_dataset(tmp_path / "data", right=4)
    with FakeOpenAI(answers) as server:
        result = run_gsm8k(_request(data, server.url, tmp_path), stream=io.StringIO())
    assert result.refused and not result.passed
    assert result.message.startswith("REFUSED gsm8k: AFD_GSM8K_LIMIT=2 is set in CI")
    assert server.requests == 0
    assert not (tmp_path / "out").exists()


def test_ci_refuses_a_lower_threshold_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("AFD_GSM8K_THRESHOLD", "0.2")
    data, answers = make_dataset(tmp_path / "data", right=4)
    with FakeOpenAI(answers) as server:
        result = run_gsm8k(_request(data, server.url, tmp_path), stream=io.StringIO())
    assert result.refused
    assert "AFD_GSM8K_THRESHOLD=0.2 lowers the threshold 0.5 in CI" in result.message
    assert server.requests == 0


def test_ci_accepts_a_higher_threshold_env_and_reports_it() -> None:
    got = env_overrides({"CI": "1", "AFD_GSM8K_THRESHOLD": "0.7"}, 24, 0.5)
    assert got.threshold == 0.7 and got.limit is None
    assert got.notices == (
        "WARNING: AFD_GSM8K_THRESHOLD=0.7 overrides the threshold (requested 0.5)",
    )


def test_outside_ci_both_overrides_apply_loudly() -> None:
    got = env_overrides({"AFD_GSM8K_LIMIT": "5", "AFD_GSM8K_THRESHOLD": "0.1"}, 24, 0.5)
    assert (got.limit, got.threshold) == (5, 0.1)
    assert got.notices == (
        (
            "WARNING: AFD_GSM8K_LIMIT=5 overrides the sample count (requested 24); "
            "not a gate result"
        ),
        (
            "WARNING: AFD_GSM8K_THRESHOLD=0.1 overrides the threshold "
            "(requested 0.5); not a gate result"
        ),
    )


def test_malformed_override_values_are_refused_together() -> None:
    with pytest.raises(Refused) as info:
        env_overrides({"AFD_GSM8K_LIMIT": "ten", "AFD_GSM8K_THRESHOLD": "nan"}, 24, 0.5)
    assert "AFD_GSM8K_LIMIT must be an integer >= 1, got 'ten'" in str(info.value)
    assert "AFD_GSM8K_THRESHOLD must be a number in [0, 1], got 'nan'" in str(
        info.value
    )


def test_dbo_needs_twelve_in_flight_and_twenty_four_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, answers = make_dataset(tmp_path / "data", right=30)
    with FakeOpenAI(answers) as server:
        flags = "--model m --dbo --samples 12 --concurrency 4"
        code = cli.main(
            ["gsm8k", "--base-url", server.url, *flags.split()]
            + ["--data", str(data), "--out", str(tmp_path / "out")]
        )
    out = capsys.readouterr().out
    assert code == 2
    assert server.requests == 0
    assert (
        "REFUSED gsm8k: a DBO run needs concurrency >= 12, got 4; "
        "a DBO run needs >= 24 samples, got 12"
    ) in out


def test_bad_request_fields_are_listed_together(tmp_path: Path) -> None:
    data, _ = make_dataset(tmp_path / "data", right=4)
    request = _request(
        data, "127.0.0.1:8000", tmp_path, samples=0, threshold=1.5, concurrency=0
    )
    result = run_gsm8k(request, stream=io.StringIO())
    assert result.refused
    expected = [
        "base_url must be an http(s) URL",
        "samples must be >= 1",
        "threshold must be in [0, 1]",
        "concurrency must be >= 1",
    ]
    assert [part for part in expected if part not in result.message] == []


def test_missing_data_says_what_to_place_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m"])
    out = capsys.readouterr().out
    assert code == 2
    assert "GSM8K data not given (no --data, AFD_GSM8K_DATA unset)" in out
    assert "test.jsonl and train.jsonl" in out
    assert "main/test-00000-of-00001.parquet" in out


def test_half_a_copy_names_the_file_it_found(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "test.jsonl", make_items(3))
    with pytest.raises(Gsm8kDataError) as info:
        resolve_data(tmp_path, {})
    assert f"found only {tmp_path / 'test.jsonl'}" in str(info.value)


def test_data_from_env_and_from_the_test_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _ = make_dataset(tmp_path / "data", right=5, train=3)
    from_env = resolve_data(None, {"AFD_GSM8K_DATA": str(data)})
    from_file = resolve_data(data / "test.jsonl", {})
    assert from_env == from_file
    assert (from_env.test_rows, from_env.train_rows) == (5, 3)
    assert from_env.train == (data / "train.jsonl").resolve()


def test_malformed_lines_are_all_reported_with_file_and_line(tmp_path: Path) -> None:
    data, _ = make_dataset(tmp_path / "data", right=2)
    test = data / "test.jsonl"
    with test.open("a") as fh:
        fh.write("{not json\n")
        fh.write(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
        fh.write(json.dumps({"answer": "x #### 1"}) + "\n")
    with pytest.raises(Gsm8kDataError) as info:
        resolve_data(data, {})
    message = str(info.value)
    assert "(3 problems)" in message
    assert f"{test}:3: not JSON" in message
    assert f"{test}:4: field 'answer' must end with '#### <number>'" in message
    assert f"{test}:5: field 'question' must be a non-empty string" in message


def test_completions_url_accepts_root_v1_or_full_path() -> None:
    full = "http://127.0.0.1:8000/v1/completions"
    for given in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1/", full):
        assert completions_url(given) == full


RESULTS = {
    "results": {
        "gsm8k": {"exact_match,strict-match": 0.41, "exact_match,flexible-extract": 0.5}
    },
    "n-samples": {"gsm8k": {"original": 1319, "effective": 24}},
}


def test_verdict_line_pass_and_fail() -> None:
    assert judge(RESULTS, 24, 24, 0.27).message == (
        "PASS gsm8k exact_match,strict-match 0.41 >= 0.27 (n=24)"
    )
    failed = judge(RESULTS, 24, 24, 0.5)
    assert not failed.passed
    assert failed.message == "FAIL gsm8k exact_match,strict-match 0.41 < 0.50 (n=24)"


def test_printed_numbers_never_hide_the_order() -> None:
    assert format_pair(5 / 12, 0.4167) == ("0.41667", "0.4167")
    assert format_pair(0.5, 0.5) == ("0.50", "0.50")


def test_nan_missing_or_short_counts_fail() -> None:
    nan = json.loads(json.dumps(RESULTS).replace("0.41", "NaN"))
    assert math.isnan(nan["results"]["gsm8k"]["exact_match,strict-match"])
    assert judge(nan, 24, 24, 0.0).message == (
        "FAIL gsm8k: exact_match,strict-match is not a finite number (nan)"
    )
    missing = json.loads(json.dumps(RESULTS).replace("flexible-extract", "other"))
    assert judge(missing, 24, 24, 0.0).message == (
        "FAIL gsm8k: exact_match,flexible-extract is missing"
    )
    short = judge(RESULTS, 23, 24, 0.0)
    assert not short.passed and "per-sample file holds 23" in short.message
    assert not judge(RESULTS, 24, 25, 0.0).passed
    assert not judge(None, None, 24, 0.0).passed


def test_help_stays_free_of_lm_eval_torch_and_vllm() -> None:
    code = (
        "import sys\n"
        "for m in ('torch', 'vllm'):\n"
        "    sys.modules[m] = None\n"
        "from afd_e2e import cli\n"
        "for name in cli.COMMANDS:\n"
        "    cli.build_parser([name])\n"
        "import afd_e2e.checks.gsm8k, afd_e2e.checks.gsm8k.lmeval\n"
        "import afd_e2e.checks.evidence\n"
        "heavy = [m for m in ('lm_eval', 'datasets', 'aiohttp', 'pyarrow')\n"
        "         if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_child_module_started_is_the_lm_eval_side() -> None:
    done = subprocess.run(
        [sys.executable, "-m", CHILD_MODULE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"usage: python -m {CHILD_MODULE} SPEC.json"
    assert lmeval.__name__ == CHILD_MODULE
