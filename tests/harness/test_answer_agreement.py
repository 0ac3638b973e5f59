# SPDX-License-Identifier: Apache-2.0
"""Generated GSM8K items are valid data; AFD/colocated answer comparison."""

from __future__ import annotations

import json
from pathlib import Path

from afd_e2e.checks.answer_agreement import compare_runs
from afd_e2e.checks.gsm8k.data import resolve_data
from afd_e2e.checks.gsm8k.items import write_items


def test_generated_items_are_accepted_by_the_data_reader(tmp_path: Path) -> None:
    directory = write_items(tmp_path / "items", test=12, train=3, seed=5)
    data = resolve_data(directory, {})
    lines = (directory / "test.jsonl").read_text().splitlines()
    assert len(lines) == 12
    first = json.loads(lines[0])
    assert first["answer"].rsplit("#### ", 1)[1].isdigit()
    assert data is not None
    again = write_items(tmp_path / "again", test=12, train=3, seed=5)
    assert (again / "test.jsonl").read_text() == (directory / "test.jsonl").read_text()


def samples(path: Path, answers: dict[int, str]) -> Path:
    with path.open("w") as fh:
        for doc_id, text in answers.items():
            fh.write(json.dumps({"doc_id": doc_id, "resps": [[text]]}) + "\n")
    return path


def test_identical_answers_pass(tmp_path: Path) -> None:
    a = samples(tmp_path / "a.jsonl", {0: " 12", 1: " 7"})
    b = samples(tmp_path / "b.jsonl", {1: " 7", 0: " 12"})
    result = compare_runs(a, b)
    assert result.passed and result.compared == 2
    assert result.message == "PASS gsm8k answers: 2/2 identical to the colocated run"


def test_one_differing_answer_fails_and_is_named(tmp_path: Path) -> None:
    a = samples(tmp_path / "a.jsonl", {0: " 12", 1: " 7", 2: " 1"})
    b = samples(tmp_path / "b.jsonl", {0: " 12", 1: " 8", 2: " 1"})
    result = compare_runs(a, b)
    assert not result.passed and result.differing == 1
    assert (
        "1/3 differ from the colocated run; first doc 1: ' 7' vs ' 8'" in result.message
    )


def test_missing_or_mismatched_runs_fail(tmp_path: Path) -> None:
    a = samples(tmp_path / "a.jsonl", {0: " 12"})
    b = samples(tmp_path / "b.jsonl", {1: " 12"})
    assert not compare_runs(a, None).passed
    assert not compare_runs(a, tmp_path / "nope.jsonl").passed
    assert "different documents" in compare_runs(a, b).message
