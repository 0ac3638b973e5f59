# SPDX-License-Identifier: Apache-2.0
"""README stays true: its test command is what CI runs; generated tables match."""

from __future__ import annotations

import re
from pathlib import Path

from afd_e2e.publish.doc_tables import core_blocks, stale_blocks

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    found = {}
    for line in section.splitlines():
        match = re.match(r"^(tox [^#]+?)\s+#\s*(.+)$", line)
        if match:
            kind = "tests" if "test" in match.group(2) else "main"
            found[kind] = match.group(1).strip()
    return found


def test_readme_names_one_main_and_one_test_command() -> None:
    commands = readme_commands()
    assert set(commands) == {"main", "tests"}, commands


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    ci_lines = [line.strip() for line in ci.splitlines()]
    assert readme_commands()["tests"] in ci_lines


def test_generated_tables_are_up_to_date() -> None:
    assert stale_blocks(ROOT, core_blocks()) == []


def test_tox_defines_the_environments_the_readme_calls() -> None:
    tox = (ROOT / "tox.ini").read_text()
    for command in readme_commands().values():
        for env in command.split("-e", 1)[1].split()[0].split(","):
            assert f"[testenv:{env}]" in tox, env
