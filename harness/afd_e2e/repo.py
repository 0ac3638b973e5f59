# SPDX-License-Identifier: Apache-2.0
"""Locating the repository the harness works on (scenarios, ci, docs).

Commands default to the nearest directory above the working directory that
holds ``scenarios/`` and ``pyproject.toml``.
"""

from __future__ import annotations

from pathlib import Path


def find_root(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "scenarios").is_dir() and (
            candidate / "pyproject.toml"
        ).is_file():
            return candidate
    raise FileNotFoundError(
        f"no afd-plugin checkout (a directory with scenarios/ and pyproject.toml) "
        f"at or above {here}; pass --root"
    )
