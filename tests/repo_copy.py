# SPDX-License-Identifier: Apache-2.0
"""A copy of the repository as git sees it, for tests that build the package
(nothing is ever written into the checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
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
