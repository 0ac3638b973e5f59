# SPDX-License-Identifier: Apache-2.0
"""The package builds on a machine without the Ascend toolkit: ``pip wheel``
of a copy of the repository (its git files; nothing is written into the
checkout) compiles nothing, with ``CC``/``CXX`` set to ``/bin/false`` to
prove it, and gives a pure wheel without native files; forcing the Ascend
ops there fails with the message that says what is missing.
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from afd_plugin import native_build as nb

ROOT = Path(__file__).resolve().parents[2]
NATIVE_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".o", ".a", ".obj", ".lib")
SOURCE_SUFFIXES = (".cpp", ".cc", ".c", ".h", ".hpp")

if shutil.which("git") is None or not (ROOT / ".git").exists():
    pytest.skip("needs the git checkout", allow_module_level=True)
if Path(nb.DEFAULT_TOOLKIT).is_dir():
    pytest.skip("an Ascend toolkit is installed here", allow_module_level=True)


def copy_of_the_repo(dest: Path) -> Path:
    """The files git tracks or would track (untracked, not ignored), as they
    are in the working tree."""
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


def pip_wheel(
    tmp_path: Path, switch: str | None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    src = copy_of_the_repo(tmp_path / "src")
    out = tmp_path / "wheels"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (nb.SWITCH, nb.KERNEL_LIBRARY_ENV, *nb.TOOLKIT_ENV_VARS)
        and not k.startswith("PIP_")
    }
    env.update(
        CC="/bin/false",
        CXX="/bin/false",
        LDSHARED="/bin/false",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
    )
    if switch is not None:
        env[nb.SWITCH] = switch
    result = subprocess.run(
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
        timeout=120,
    )
    return result, out


@pytest.mark.parametrize("switch", [None, "0"], ids=["unset", "0"])
def test_the_wheel_is_pure_and_compiles_nothing(
    tmp_path: Path, switch: str | None
) -> None:
    result, out = pip_wheel(tmp_path, switch)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    expected = f"afd-plugin: not building the Ascend ops ({nb.EXTENSION}): " + (
        f"{nb.SWITCH} says skip" if switch else "not detected, missing: "
    )
    assert expected in log, log[-4000:]
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    assert re.fullmatch(r"afd_plugin-[^-]+-py3-none-any\.whl", wheels[0].name)
    with zipfile.ZipFile(wheels[0]) as whl:
        names = whl.namelist()
        info = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        wheel_meta = email.parser.Parser().parsestr(whl.read(info).decode())
    assert wheel_meta["Root-Is-Purelib"] == "true"
    assert wheel_meta.get_all("Tag") == ["py3-none-any"]
    assert [n for n in names if n.endswith(NATIVE_SUFFIXES)] == []
    assert [n for n in names if n.endswith(SOURCE_SUFFIXES) or "csrc" in n] == []
    assert "afd_plugin/native_build.py" in names
    assert "afd_plugin/connectors/npu/cam_p2p_ops.py" in names
    assert not any("_C_ascend" in n for n in names)


def test_forcing_the_ascend_ops_without_the_toolkit_fails_clearly(
    tmp_path: Path,
) -> None:
    result, out = pip_wheel(tmp_path, "1")
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-4000:]
    assert (
        f"{nb.SWITCH}=1 forces the build of {nb.EXTENSION}, but this machine "
        "lacks: the CANN toolkit"
    ) in log, log[-4000:]
    assert "torch_npu (not importable" in log
    assert list(out.glob("*.whl")) == []


def test_an_invalid_switch_fails_the_build(tmp_path: Path) -> None:
    result, _ = pip_wheel(tmp_path, "sometimes")
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{nb.SWITCH}='sometimes': use 1/true/yes/on" in log, log[-4000:]
