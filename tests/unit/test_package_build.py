# SPDX-License-Identifier: Apache-2.0
"""The package builds on a machine without the Ascend toolkit: ``pip wheel``
of a copy of the repository (its git files; nothing is written into the
checkout) compiles nothing, with ``CC``/``CXX`` set to ``/bin/false`` to
prove it, and gives a pure wheel without native files; forcing the Ascend
ops there fails with the message that says what is missing. The sdist
carries ``csrc/`` so that an Ascend machine can build from it.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from repo_copy import build_env, copy_of_the_repo, pip_wheel

from afd_plugin import native_build as nb

ROOT = Path(__file__).resolve().parents[2]
NATIVE_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".o", ".a", ".obj", ".lib")
SOURCE_SUFFIXES = (".cpp", ".cc", ".c", ".h", ".hpp")


def build(
    tmp_path: Path, switch: str | None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    src = copy_of_the_repo(tmp_path / "src")
    out = tmp_path / "wheels"
    env = build_env(CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false")
    if switch is not None:
        env[nb.SWITCH] = switch
    return pip_wheel(src, out, env, 120), out


@pytest.mark.parametrize("switch", [None, "0"], ids=["unset", "0"])
def test_the_wheel_is_pure_and_compiles_nothing(
    tmp_path: Path, switch: str | None
) -> None:
    result, out = build(tmp_path, switch)
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
    assert "afd_e2e/plan_profiles/h800.yaml" in names  # the planner's data
    assert not any("_C_ascend" in n for n in names)


def test_forcing_the_ascend_ops_without_the_toolkit_fails_clearly(
    tmp_path: Path,
) -> None:
    result, out = build(tmp_path, "1")
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-4000:]
    assert (
        f"{nb.SWITCH}=1 forces the build of {nb.EXTENSION}, but this machine "
        "lacks: the CANN toolkit"
    ) in log, log[-4000:]
    assert "torch_npu (not importable" in log
    assert list(out.glob("*.whl")) == []


def test_an_invalid_switch_fails_the_build(tmp_path: Path) -> None:
    result, _ = build(tmp_path, "sometimes")
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{nb.SWITCH}='sometimes': use 1/true/yes/on" in log, log[-4000:]


def test_the_sdist_carries_the_native_sources_and_compiles_nothing(
    tmp_path: Path,
) -> None:
    """An Ascend machine builds from the sdist: it holds csrc/ (MANIFEST.in),
    setup.py and the build decision it loads by path."""
    src = copy_of_the_repo(tmp_path / "src")
    out = tmp_path / "sdist"
    build = "import sys; from setuptools import build_meta as b; "
    build += "print(b.build_sdist(sys.argv[1]))"
    result = subprocess.run(
        [sys.executable, "-c", build, str(out)],
        cwd=src,
        env={**os.environ, "CC": "/bin/false", "CXX": "/bin/false"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    [sdist] = list(out.glob("afd_plugin-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for wanted in (
        "setup.py",
        "MANIFEST.in",
        "csrc/npu/afd_ascend_ops.cpp",
        "csrc/npu/afd_cam_p2p_kernels.h",
        "plugin/afd_plugin/native_build.py",
    ):
        assert wanted in names, wanted
    assert [n for n in names if n.endswith(NATIVE_SUFFIXES)] == []
