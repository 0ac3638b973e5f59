# SPDX-License-Identifier: Apache-2.0
"""A rendered CI step, run as Buildkite runs it: the scenario's run, then its
summary posted as an annotation styled by the outcome, whatever the outcome,
and the step keeps the run's exit code; its run directory is the artifacts.
``afd-e2e`` and ``buildkite-agent`` are stand-ins on PATH that record what
they were given (the real run is tests/e2e; the agent exists only on CI)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.define.catalogue import Catalogue
from afd_e2e.publish.gates import render_step


def stand_in(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def run_step(tmp_path: Path, exit_code: int, agent: bool) -> tuple[int, Path]:
    scenario = Catalogue.load(ROOT).get("afd-eager-2a2f")
    step = render_step("afd-eager-2a2f", scenario)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The run writes its summary where --run-dir says, then ends as told.
    stand_in(
        bin_dir / "afd-e2e",
        'while [ "$1" != "--run-dir" ]; do shift; done\n'
        'mkdir -p "$2" && echo "### summary" > "$2/summary.md"\n'
        f"exit {exit_code}\n",
    )
    if agent:
        stand_in(
            bin_dir / "buildkite-agent",
            f'echo "$@" > {tmp_path}/agent-args; cat > {tmp_path}/agent-stdin\n',
        )
    # Buildkite turns $$ into $ before the shell sees the command.
    command = step["command"].replace("$$", "$")
    done = subprocess.run(
        ["sh", "-c", command],
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "AFD_MODEL_ROOT": "/models"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.returncode, tmp_path


@pytest.mark.parametrize(("code", "style"), [(0, "success"), (1, "error")])
def test_the_step_posts_its_summary_and_keeps_the_runs_exit_code(
    tmp_path: Path, code: int, style: str
) -> None:
    returned, where = run_step(tmp_path, code, agent=True)
    assert returned == code
    args = (where / "agent-args").read_text().split()
    assert args[:3] == ["annotate", "--context", "e2e-afd-eager-2a2f"]
    assert args[3:] == ["--style", style]
    assert (where / "agent-stdin").read_text() == "### summary\n"


def test_without_the_agent_the_step_is_the_run(tmp_path: Path) -> None:
    returned, where = run_step(tmp_path, 3, agent=False)
    assert returned == 3 and not (where / "agent-args").exists()


def test_the_artifacts_are_the_run_directory_files() -> None:
    scenario = Catalogue.load(ROOT).get("afd-eager-2a2f")
    step = render_step("afd-eager-2a2f", scenario)
    assert step["artifact_paths"] == [
        f"afd-runs/afd-eager-2a2f/{name}"
        for name in ("results.json", "junit.xml", "summary.md", "*.log")
    ]
    assert "--run-dir afd-runs/afd-eager-2a2f" in step["command"]
