"""register(): idempotent, silent without patches, loud when a patch fails."""

from __future__ import annotations

import logging
import subprocess
import sys
import types

import pytest

import afd_plugin
from afd_plugin import patches


def test_register_is_idempotent_and_silent(caplog: pytest.LogCaptureFixture) -> None:
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG)\n"
        "import afd_plugin\n"
        "afd_plugin.register(); afd_plugin.register()\n"
        "from afd_plugin import patches\n"
        "print(len(patches.applied), len(patches.failed))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr
    applied, failed = map(int, result.stdout.split())
    assert failed == 0 and applied == len(patches.PATCH_MODULES)


def test_disable_env_makes_register_a_noop() -> None:
    code = (
        "import afd_plugin, afd_plugin.patches as p\n"
        "p.PATCH_MODULES = ('no.such.module',)\n"
        "afd_plugin.register()\n"
        "print(len(p.failed))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"AFD_PLUGIN_DISABLE": "1", "PATH": ""},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    assert "AFD_PLUGIN_DISABLE" in result.stderr


def test_patch_failure_is_a_warning_and_blocks_afd(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = types.ModuleType("afd_test_broken_patch")

    def apply() -> None:
        raise AttributeError("GPUModelRunner.load_model changed signature")

    broken.apply = apply  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "afd_test_broken_patch", broken)
    monkeypatch.setattr(patches, "failed", {})
    monkeypatch.setattr(patches, "applied", [])
    with caplog.at_level(logging.DEBUG, logger="afd_plugin"):
        patches.apply_patches(("afd_test_broken_patch", "afd_test_missing_patch"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "changed signature" in warnings[0].getMessage()
    with pytest.raises(
        RuntimeError, match="afd_test_broken_patch.*afd_test_missing_patch"
    ):
        patches.require_patches()


def test_register_is_the_entry_point() -> None:
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "afd"]
    assert len(eps) == 1 and eps[0].load() is afd_plugin.register
