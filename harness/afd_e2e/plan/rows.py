# SPDX-License-Identifier: Apache-2.0
"""Rows of named numbers read from a CSV or JSON file (calibration
measurements, request traces), with every bad cell named by line and field.

CSV: a header line naming the columns, then one row per line; ``#`` lines are
comments. JSON: a list of objects, or an object whose ``rows`` is one.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from afd_e2e.plan.types import PlanInputError


def read_rows(
    path: Path, required: Sequence[str], optional: Sequence[str] = ()
) -> list[dict[str, float]]:
    """The rows of ``path`` as ``{column: number}``; an optional column is
    absent from a row that leaves it empty. Raises ``PlanInputError`` naming
    every problem (file, line or row, field)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanInputError(f"{path}: cannot read: {exc}") from None
    allowed = (*required, *optional)
    if path.suffix.lower() == ".json":
        raw = _json_rows(path, text)
    else:
        raw = _csv_rows(path, text, required, allowed)
    problems: list[str] = []
    rows: list[dict[str, float]] = []
    for where, record in raw:
        row: dict[str, float] = {}
        for key in record:
            if key not in allowed:
                problems.append(
                    f"{where}: unknown field {key!r}; allowed: {', '.join(allowed)}"
                )
        for key in allowed:
            value = record.get(key)
            if value is None or value == "":
                if key in required:
                    problems.append(f"{where}: field {key!r} is required")
                continue
            number = _number(value)
            if number is None or number < 0:
                problems.append(
                    f"{where}: field {key!r} must be a non-negative number, "
                    f"got {value!r}"
                )
                continue
            row[key] = number
        rows.append(row)
    if not raw:
        problems.append(f"{path}: no rows")
    if problems:
        raise PlanInputError(problems)
    return rows


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _json_rows(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanInputError(
            f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}"
        ) from None
    if isinstance(data, dict):
        data = data.get("rows")
    if not isinstance(data, list):
        raise PlanInputError(
            f"{path}: expected a list of rows, or an object with a 'rows' list"
        )
    out = []
    problems = []
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            problems.append(f"{path}: rows[{index}]: must be an object")
            continue
        out.append((f"{path}: rows[{index}]", item))
    if problems:
        raise PlanInputError(problems)
    return out


def _csv_rows(
    path: Path, text: str, required: Sequence[str], allowed: Sequence[str]
) -> list[tuple[str, dict[str, Any]]]:
    lines = [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        return []
    header_line, header = lines[0]
    columns = [name.strip() for name in next(csv.reader([header]))]
    unknown = [name for name in columns if name not in allowed]
    missing = [name for name in required if name not in columns]
    problems = []
    if unknown:
        problems.append(
            f"{path}:{header_line}: unknown column(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(allowed)}"
        )
    if missing:
        problems.append(
            f"{path}:{header_line}: missing column(s) {', '.join(missing)}; "
            f"the header must name {', '.join(required)}"
        )
    if problems:
        raise PlanInputError(problems)
    out = []
    for number, line in lines[1:]:
        cells = next(csv.reader(io.StringIO(line)))
        if len(cells) != len(columns):
            problems.append(
                f"{path}:{number}: {len(cells)} values for {len(columns)} columns"
            )
            continue
        out.append(
            (
                f"{path}:{number}",
                {name: cell.strip() for name, cell in zip(columns, cells, strict=True)},
            )
        )
    if problems:
        raise PlanInputError(problems)
    return out
