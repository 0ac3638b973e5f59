# SPDX-License-Identifier: Apache-2.0
"""A throwaway copy of this repository's scenarios, CI lists and docs, for
tests that break one thing and ask the linter about it."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = (
    "pyproject.toml",
    "README.md",
    "scenarios",
    "ci",
    "docs",
    "benchmarks/results",
    "tests/e2e/README.md",
)


def make_repo(dest: Path) -> Path:
    for rel in COPIED:
        src, dst = ROOT / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
    return dest


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def pos(path: Path, needle: str, key: str) -> str:
    """``line:col`` of ``key`` on the first line containing ``needle``."""
    number = line_of(path, needle)
    text = path.read_text().splitlines()[number - 1]
    return f"{number}:{text.index(key) + 1}"
