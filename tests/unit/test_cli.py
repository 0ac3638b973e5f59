# SPDX-License-Identifier: Apache-2.0
"""afd-e2e entry point: help lists every subcommand and imports none of them;
gaps say so and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from afd_e2e.cli import COMMANDS, NOT_AVAILABLE_EXIT, _available, main


def test_help_lists_every_subcommand() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "afd_e2e.cli", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    for name in COMMANDS:
        assert name in result.stdout


def test_unavailable_subcommand_says_so(capsys) -> None:
    missing = [name for name in COMMANDS if not _available(name)]
    for name in missing:
        assert main([name]) == NOT_AVAILABLE_EXIT
        assert "not yet available" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    from importlib.metadata import entry_points

    scripts = [e for e in entry_points(group="console_scripts") if e.name == "afd-e2e"]
    assert scripts and scripts[0].value == "afd_e2e.cli:main"


def test_top_level_help_imports_no_subcommand_module() -> None:
    code = (
        "import sys\n"
        "from afd_e2e.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = [m for m in sys.modules if m.startswith('afd_e2e.commands.')]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "run" in result.stdout


def test_the_chosen_subcommand_gets_its_arguments(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help"])
    assert exited.value.code == 0
    assert "--keep-running" in capsys.readouterr().out
