# SPDX-License-Identifier: Apache-2.0
"""The GSM8K gate end to end: real lm-eval against a local fake completions server.

Every run here starts lm-eval in its own offline interpreter (a few seconds each).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from fake_openai import GATE_ENV, FakeOpenAI, make_dataset, make_items

from afd_e2e import cli
from afd_e2e.checks.gsm8k import Gsm8kRequest, run_gsm8k
from afd_e2e.checks.gsm8k.data import resolve_data

REAL_DATA = os.environ.get("AFD_GSM8K_DATA", "")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in GATE_ENV:
        monkeypatch.delenv(name, raising=False)


def test_mixed_answers_score_exactly_offline_and_concurrently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 items: 6 right, 3 right without '####', 3 wrong; 2-shot, concurrency 4.

    The hub is unreachable: HF_ENDPOINT points at the fake server (which
    records any stray request), HF_HOME is empty, HTTP(S) proxies are dead.
    """
    data, answers = make_dataset(tmp_path / "data", right=6, bare=3, wrong=3)
    stream = io.StringIO()
    with FakeOpenAI(answers, hold_for=4) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
        request = Gsm8kRequest(
            base_url=server.url,
            model="afd-served-name",
            samples=12,
            threshold=0.5,
            concurrency=4,
            fewshot=2,
            data=data,
            out_dir=tmp_path / "out",
            max_gen_toks=64,
        )
        result = run_gsm8k(request, stream=stream)
    progress = stream.getvalue()

    # the score: exactly the fraction the server got right
    assert result.message == "PASS gsm8k exact_match,strict-match 0.50 >= 0.50 (n=12)"
    assert (result.strict, result.flexible) == (0.5, 0.75), progress
    assert (result.n, result.requested, result.passed) == (12, 12, True)
    # the requests: greedy, bounded, 2-shot, really 4 in flight
    assert server.requests == 12 and server.max_in_flight == 4
    assert {b["temperature"] for b in server.bodies} == {0.0}
    assert {b["max_tokens"] for b in server.bodies} == {64}
    assert {b["model"] for b in server.bodies} == {"afd-served-name"}
    assert all(p.count("Question: ") == 3 for p in server.prompts)
    # offline: nothing asked the (fake) hub, nothing was downloaded
    assert server.stray == []
    assert not (tmp_path / "hf_home").exists()
    # progress: done/total and a rate, ending at 12/12
    lines = [ln for ln in progress.splitlines() if "requests done" in ln]
    assert lines and lines[-1].startswith("gsm8k: 12/12 requests done, "), progress
    assert " req/s" in lines[-1]
    # lm-eval's own results and per-sample records are kept
    assert result.results_path is not None and result.samples_path is not None
    saved = json.loads(result.results_path.read_text())
    assert saved["results"]["gsm8k"]["exact_match,strict-match"] == 0.5
    records = [json.loads(line) for line in result.samples_path.open()]
    assert {r["filter"] for r in records} == {"strict-match", "flexible-extract"}
    assert len({r["doc_id"] for r in records}) == 12
    assert result.summary_path is not None
    assert json.loads(result.summary_path.read_text())["passed"] is True
    assert "include:" in (tmp_path / "out/lm_eval_task/afd_gsm8k.yaml").read_text()


def test_fewer_items_than_requested_is_a_mismatch(tmp_path: Path) -> None:
    data, answers = make_dataset(tmp_path / "data", right=6)
    with FakeOpenAI(answers) as server:
        result = run_gsm8k(
            Gsm8kRequest(
                base_url=server.url,
                model="m",
                samples=10,
                fewshot=0,
                data=data,
                out_dir=tmp_path / "o",
            ),
            stream=io.StringIO(),
        )
    assert not result.passed
    assert result.n == 6
    assert "requested 10, lm-eval evaluated 6" in result.message


TOO_LONG = "This model's maximum context length is 1024 tokens."


@pytest.mark.parametrize(
    ("status", "reason", "concurrency"),
    [
        (500, "engine died", 2),  # lm-eval's concurrent (aiohttp) client
        (400, TOO_LONG, 1),  # its one-at-a-time (requests) client
    ],
)
def test_server_error_fails_without_retrying_and_says_why(
    status: int, reason: str, concurrency: int, tmp_path: Path
) -> None:
    data, answers = make_dataset(tmp_path / "data", right=4)
    with FakeOpenAI(answers, fail_status=status, fail_message=reason) as server:
        result = run_gsm8k(
            Gsm8kRequest(
                base_url=server.url,
                model="m",
                samples=4,
                fewshot=0,
                concurrency=concurrency,
                data=data,
                out_dir=tmp_path / "o",
            ),
            stream=io.StringIO(),
        )
    assert not result.passed and not result.refused
    assert result.message.startswith("FAIL gsm8k: lm-eval run failed: ")
    assert str(status) in result.message
    assert f"the server said: {reason}" in result.message
    assert server.requests <= 4  # one attempt per request at most, no retries


def test_dbo_run_reaches_twelve_requests_in_flight(tmp_path: Path) -> None:
    data, answers = make_dataset(tmp_path / "data", right=18, wrong=6)
    with FakeOpenAI(answers, hold_for=12) as server:
        result = run_gsm8k(
            Gsm8kRequest(
                base_url=server.url,
                model="m",
                samples=24,
                threshold=0.75,
                concurrency=12,
                fewshot=1,
                data=data,
                out_dir=tmp_path / "o",
                dbo=True,
            ),
            stream=io.StringIO(),
        )
    assert result.passed, result.message
    assert result.message == "PASS gsm8k exact_match,strict-match 0.75 >= 0.75 (n=24)"
    assert server.max_in_flight == 12


def test_cli_limit_override_and_threshold_fail_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside CI, AFD_GSM8K_LIMIT=4 evaluates 4 of 8 items, and says so loudly."""
    monkeypatch.setenv("AFD_GSM8K_LIMIT", "4")
    data, answers = make_dataset(tmp_path / "data", right=2, wrong=6)
    with FakeOpenAI(answers) as server:
        flags = "--model m --samples 8 --threshold 0.6 --fewshot 0 --concurrency 2"
        code = cli.main(
            ["gsm8k", "--base-url", server.url + "/v1", *flags.split()]
            + ["--data", str(data), "--out", str(tmp_path / "o")]
        )
    captured = capsys.readouterr()
    assert code == 1
    assert server.requests == 4
    assert "FAIL gsm8k exact_match,strict-match 0.50 < 0.60 (n=4)" in (
        captured.out.splitlines()
    )
    assert "WARNING: AFD_GSM8K_LIMIT=4 overrides the sample count" in captured.err


def _hf_parquet_layout(root: Path) -> tuple[Path, dict[str, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    items = make_items(5)
    main = root / "main"
    main.mkdir(parents=True)
    for split, rows in (("test", items), ("train", make_items(3, offset=50))):
        table = pa.table(
            {"question": [i.question for i in rows], "answer": [i.answer for i in rows]}
        )
        pq.write_table(table, main / f"{split}-00000-of-00001.parquet")
    return root, {it.question: it.completion("right") for it in items}


def _published_real_copy(root: Path) -> tuple[Path, dict[str, str]]:
    """The real splits in $AFD_GSM8K_DATA, the first 3 test items answered right."""
    test = resolve_data(REAL_DATA, {}).test
    if test.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(test).slice(0, 3).to_pylist()
    else:
        with test.open(encoding="utf-8") as fh:
            rows = [json.loads(next(fh)) for _ in range(3)]
    return Path(REAL_DATA), {row["question"]: " " + row["answer"] for row in rows}


LAYOUTS = {"hf-parquet": _hf_parquet_layout}
if REAL_DATA:  # CI machines that carry the published splits (see .ci/run)
    LAYOUTS["published-real"] = _published_real_copy


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_lm_eval_reads_the_other_layouts(layout: str, tmp_path: Path) -> None:
    data, answers = LAYOUTS[layout](tmp_path / "data")
    with FakeOpenAI(answers) as server:
        result = run_gsm8k(
            Gsm8kRequest(
                base_url=server.url,
                model="m",
                samples=3,
                threshold=1.0,
                fewshot=2,
                concurrency=3,
                data=data,
                out_dir=tmp_path / "o",
            ),
            stream=io.StringIO(),
        )
    assert result.message == "PASS gsm8k exact_match,strict-match 1.00 >= 1.00 (n=3)"
    assert server.stray == []
