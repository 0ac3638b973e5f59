# SPDX-License-Identifier: Apache-2.0
"""Building the package from a copy of the repository as git sees it, for
the tests that do (nothing is ever written into the checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from afd_plugin import native_build as nb

ROOT = Path(__file__).resolve().parents[1]


def copy_of_the_repo(dest: Path) -> Path:
    """The files git tracks or would track (untracked, not ignored), as they
    are in the working tree."""
    assert shutil.which("git") and (ROOT / ".git").exists(), (
        "these tests build a copy of the git checkout; run them from one"
    )
    assert not Path(nb.DEFAULT_TOOLKIT).is_dir(), (
        f"an Ascend toolkit is installed at {nb.DEFAULT_TOOLKIT}: these tests "
        "check the build of a machine without one"
    )
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = os.fsdecode(raw)
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest


def build_env(**extra: str) -> dict[str, str]:
    """This environment without anything that steers the native build or pip
    (the Ascend switch, toolkit and kernel library variables, ``PIP_*``),
    plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (nb.SWITCH, nb.KERNEL_LIBRARY_ENV, *nb.TOOLKIT_ENV_VARS)
        and not k.startswith("PIP_")
    }
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


def pip_wheel(
    src: Path, out: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """``pip wheel`` of ``src`` into ``out`` as a user builds it offline (no
    dependencies, no build isolation: the running environment's setuptools,
    torch and what ``env`` adds)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            ".",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-v",
            "-w",
            str(out),
        ],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
