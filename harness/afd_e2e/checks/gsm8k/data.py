# SPDX-License-Identifier: Apache-2.0
"""Where the GSM8K test and few-shot (train) splits come from: local files only.

Resolves ``--data`` / ``AFD_GSM8K_DATA`` to the two split files and checks them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from afd_e2e.define.policy import GSM8K_DATA_ENV

JSONL_SPLITS = ("test.jsonl", "train.jsonl")
PARQUET_SPLITS = ("test-00000-of-00001.parquet", "train-00000-of-00001.parquet")
MAX_ERRORS_SHOWN = 20

WHERE_TO_PUT_IT = f"""\
Give the GSM8K splits as local files with --data PATH or {GSM8K_DATA_ENV}=PATH;
nothing is downloaded during a run. PATH is one of:
  a directory holding test.jsonl and train.jsonl (the published layout; one
    JSON object a line: {{"question": "...", "answer": "... #### 42"}});
  a directory holding main/test-00000-of-00001.parquet and
    main/train-00000-of-00001.parquet (the Hugging Face openai/gsm8k layout;
    the main/ directory itself works too);
  the test split file itself, with its train file beside it
    (test.jsonl -> train.jsonl, test-*.parquet -> train-*.parquet).
The train split supplies the few-shot examples."""


class Gsm8kDataError(Exception):
    """The data is missing or malformed; the message says what to fix where."""


@dataclass(frozen=True)
class Gsm8kData:
    """The two split files of one GSM8K copy and their row counts."""

    test: Path
    train: Path
    format: Literal["json", "parquet"]
    test_rows: int
    train_rows: int


def resolve_data(data: str | Path | None, environ: Mapping[str, str]) -> Gsm8kData:
    """Find and check the splits named by ``data`` or ``AFD_GSM8K_DATA``."""
    raw = str(data) if data is not None else environ.get(GSM8K_DATA_ENV, "")
    if not raw:
        raise Gsm8kDataError(
            f"GSM8K data not given (no --data, {GSM8K_DATA_ENV} unset).\n"
            + WHERE_TO_PUT_IT
        )
    source = "--data" if data is not None else GSM8K_DATA_ENV
    test, train = _split_files(Path(raw).expanduser(), source)
    fmt: Literal["json", "parquet"] = "parquet" if test.suffix == ".parquet" else "json"
    errors: list[str] = []
    counts = [_check_split(path, fmt, errors) for path in (test, train)]
    if counts[0] == 0 and not errors:
        errors.append(f"{test}: the test split has no rows")
    if errors:
        shown = errors[:MAX_ERRORS_SHOWN]
        more = len(errors) - len(shown)
        raise Gsm8kDataError(
            f"GSM8K data from {source} is malformed ({len(errors)} problems):\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
        )
    return Gsm8kData(test.resolve(), train.resolve(), fmt, counts[0], counts[1])


def _split_files(path: Path, source: str) -> tuple[Path, Path]:
    if path.is_file():
        if "test" not in path.name or path.suffix not in (".jsonl", ".parquet"):
            raise Gsm8kDataError(
                f"{source}={path}: a file must be the test split (test.jsonl or "
                f"test-*.parquet).\n{WHERE_TO_PUT_IT}"
            )
        train = path.with_name(path.name.replace("test", "train", 1))
        if not train.is_file():
            raise Gsm8kDataError(
                f"{source}={path}: the few-shot split {train} is missing.\n"
                + WHERE_TO_PUT_IT
            )
        return path, train
    if not path.is_dir():
        raise Gsm8kDataError(
            f"{source}={path}: no such file or directory.\n{WHERE_TO_PUT_IT}"
        )
    layouts = [
        [path / name for name in JSONL_SPLITS],
        [path / "main" / name for name in PARQUET_SPLITS],
        [path / name for name in PARQUET_SPLITS],
    ]
    for test, train in layouts:
        if test.is_file() and train.is_file():
            return test, train
    partial = [p for layout in layouts for p in layout if p.is_file()]
    found = (
        "found only " + ", ".join(str(p) for p in partial)
        if partial
        else "found neither split"
    )
    raise Gsm8kDataError(f"{source}={path}: {found}.\n{WHERE_TO_PUT_IT}")


def _check_split(path: Path, fmt: str, errors: list[str]) -> int:
    if fmt == "parquet":
        return _check_parquet(path, errors)
    rows = 0
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            rows += 1
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"{path}:{lineno}: not JSON ({exc.msg})")
                continue
            if not isinstance(item, dict):
                errors.append(f"{path}:{lineno}: not a JSON object")
                continue
            errors.extend(
                f"{path}:{lineno}: {problem}" for problem in _check_item(item)
            )
    return rows


def _check_parquet(path: Path, errors: list[str]) -> int:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        errors.append(f"{path}: reading parquet needs pyarrow (the eval extra)")
        return 0
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types
        errors.append(f"{path}: not a readable parquet file ({exc})")
        return 0
    missing = [c for c in ("question", "answer") if c not in table.column_names]
    if missing:
        errors.append(f"{path}: missing column(s) {', '.join(missing)}")
        return table.num_rows
    for row, item in enumerate(table.select(["question", "answer"]).to_pylist()):
        errors.extend(f"{path}: row {row}: {problem}" for problem in _check_item(item))
    return table.num_rows


def _check_item(item: Mapping[str, object]) -> list[str]:
    problems = []
    for name in ("question", "answer"):
        value = item.get(name)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"field {name!r} must be a non-empty string")
    answer = item.get("answer")
    if isinstance(answer, str) and "#### " not in answer:
        problems.append("field 'answer' must end with '#### <number>'")
    return problems
