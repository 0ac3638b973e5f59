# SPDX-License-Identifier: Apache-2.0
"""register(): idempotent, a no-op without vLLM or when disabled, loud when a
patch fails; an AFD role refuses to start with any patch missing; every patch
module carries its header.

The same register() with real vLLM is tests/runtime/test_patch_targets.py.
"""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
import types
from pathlib import Path

import pytest

import afd_plugin
from afd_plugin import patches

PATCHES_DIR = Path(patches.__file__).parent
HEADER = ("What:", "Why:", "vLLM version:", "Delete when:", "Applied:")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "", **env} if env else None,
    )


def test_without_vllm_nothing_is_applied_and_an_afd_role_refuses() -> None:
    """This environment has no vLLM: register() patches nothing (and says
    nothing above DEBUG), and a role that starts anyway refuses, naming the
    patch, instead of running unpatched."""
    code = (
        "import logging\n"
        "logging.basicConfig(level=logging.DEBUG)\n"
        "import afd_plugin\n"
        "afd_plugin.register(); afd_plugin.register()\n"
        "from afd_plugin import patches\n"
        "print(len(patches.applied), len(patches.failed))\n"
        "try:\n"
        "    patches.require_patches()\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr
    counts, message = result.stdout.splitlines()
    assert counts == "0 0"
    assert "afd_plugin.patches.config_validation" in message
    assert "register() did not run" in message


def test_disable_env_makes_register_a_noop_and_afd_refuses() -> None:
    code = (
        "import afd_plugin, afd_plugin.patches as p\n"
        "p.PATCH_MODULES = ('no.such.module',)\n"
        "afd_plugin.register()\n"
        "print(len(p.failed), len(p.applied))\n"
        "p.require_patches()\n"
    )
    result = run_python(code, AFD_PLUGIN_DISABLE="1")
    assert result.stdout.strip() == "0 0"
    assert "AFD_PLUGIN_DISABLE" in result.stderr
    assert result.returncode != 0 and "no.such.module" in result.stderr


def test_patch_failure_is_a_warning_and_blocks_afd(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = types.ModuleType("afd_test_broken_patch")

    def apply() -> None:
        raise AttributeError("GPUModelRunner.load_model changed signature")

    broken.apply = apply  # type: ignore[attr-defined]
    good = types.ModuleType("afd_test_good_patch")
    good.apply = lambda: None  # type: ignore[attr-defined]
    for module in (broken, good):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(patches, "failed", {})
    monkeypatch.setattr(patches, "applied", [])
    names = ("afd_test_broken_patch", "afd_test_missing_patch", "afd_test_good_patch")
    with caplog.at_level(logging.DEBUG, logger="afd_plugin"):
        patches.apply_patches(names)
        patches.apply_patches(names)  # each is tried once
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "changed signature" in warnings[0].getMessage()
    assert patches.applied == ["afd_test_good_patch"]
    patches.require_patches(("afd_test_good_patch",))
    with pytest.raises(
        RuntimeError, match="afd_test_broken_patch.*afd_test_missing_patch"
    ):
        patches.require_patches(names)


def test_register_is_the_entry_point() -> None:
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "afd"]
    assert len(eps) == 1 and eps[0].load() is afd_plugin.register


def test_every_patch_file_is_listed_and_has_its_header() -> None:
    files = {
        f"afd_plugin.patches.{p.stem}"
        for p in PATCHES_DIR.glob("*.py")
        if p.name != "__init__.py"
    }
    assert files == set(patches.ALL_PATCH_MODULES)
    for name in patches.ALL_PATCH_MODULES:
        path = PATCHES_DIR / f"{name.rsplit('.', 1)[1]}.py"
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree) or ""
        missing = [h for h in HEADER if h not in doc]
        assert not missing, f"{path.name}: header lacks {missing}"
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "check_target" in functions, path.name
        if name in patches.PATCH_MODULES:
            assert "apply" in functions, path.name
