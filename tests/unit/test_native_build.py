# SPDX-License-Identifier: Apache-2.0
"""``afd_plugin.native_build``: the ``AFD_BUILD_ASCEND_OPS`` switch and the
detection ``setup.py`` decides with, over the whole matrix (switch x CANN
toolkit x torch_npu x kernel library), on the CPU: every input is injected.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from afd_plugin import native_build as nb

ROOT = Path(__file__).resolve().parents[2]
KERNEL_LIB = "/opt/kernels/libafd_cam_p2p_kernels.a"

FORCE = ["1", "true", "YES", " on "]
SKIP = ["0", "false", "No", "OFF "]
AUTO: list[str | None] = [None, "", "  "]
# Where the CANN toolkit is found: nowhere, each variable, the default path.
TOOLKITS: list[str | None] = [None, *nb.TOOLKIT_ENV_VARS, "default"]


def inputs(
    switch: str | None,
    toolkit: str | None,
    torch_npu: bool,
    kernels: bool,
) -> tuple[dict[str, str], Callable[[str], bool], Callable[[str], Any], Any]:
    """``(environ, path_exists, find_spec, file_exists)`` for one cell."""
    env: dict[str, str] = {}
    dirs: set[str] = set()
    if switch is not None:
        env[nb.SWITCH] = switch
    if toolkit == "default":
        dirs.add(nb.DEFAULT_TOOLKIT)
    elif toolkit is not None:
        env[toolkit] = f"/opt/ascend/{toolkit.lower()}"
        dirs.add(env[toolkit])
    if kernels:
        env[nb.KERNEL_LIBRARY_ENV] = KERNEL_LIB

    def find_spec(name: str) -> object | None:
        assert name == "torch_npu"
        return object() if torch_npu else None

    return env, dirs.__contains__, find_spec, {KERNEL_LIB}.__contains__


def run(*cell: Any) -> tuple[bool, str]:
    return nb.decide(*inputs(*cell))


@pytest.mark.parametrize("raw", FORCE)
def test_force_values(raw: str) -> None:
    assert nb.parse_switch(raw) is True


@pytest.mark.parametrize("raw", SKIP)
def test_skip_values(raw: str) -> None:
    assert nb.parse_switch(raw) is False


@pytest.mark.parametrize("raw", AUTO)
def test_unset_or_empty_detects(raw: str | None) -> None:
    assert nb.parse_switch(raw) is None


@pytest.mark.parametrize("raw", ["maybe", "2", "y", "enable", "-1"])
def test_an_invalid_switch_names_the_allowed_values(raw: str) -> None:
    with pytest.raises(ValueError) as info:
        nb.parse_switch(raw)
    message = str(info.value)
    assert message.startswith(f"{nb.SWITCH}={raw.lower()!r}")
    for value in (*nb.FORCE_VALUES, *nb.SKIP_VALUES):
        assert value in message
    assert "leave it empty" in message
    # The wording tests/runtime/test_cam_p2p_connector.py matches.
    assert re.search("1/true/yes/on .* 0/false/no/off", message)


def test_an_invalid_switch_fails_the_decision_whatever_is_installed() -> None:
    for toolkit, torch_npu, kernels in itertools.product(
        TOOLKITS, (False, True), (False, True)
    ):
        with pytest.raises(ValueError, match="1/true/yes/on"):
            run("sometimes", toolkit, torch_npu, kernels)


def test_build_switch_reads_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(nb.SWITCH, "on")
    assert nb.build_switch() is True
    monkeypatch.delenv(nb.SWITCH)
    assert nb.build_switch() is None
    assert nb.build_switch({nb.SWITCH: "0"}) is False


MATRIX = list(itertools.product(TOOLKITS, (False, True), (False, True)))


def cell_id(cell: tuple[str | None, bool, bool]) -> str:
    toolkit, torch_npu, kernels = cell
    return (
        f"cann={toolkit or 'none'}-torch_npu={'yes' if torch_npu else 'no'}"
        f"-kernels={'yes' if kernels else 'no'}"
    )


@pytest.mark.parametrize("cell", MATRIX, ids=cell_id)
@pytest.mark.parametrize("switch", SKIP)
def test_skip_never_builds_nor_looks(
    switch: str, cell: tuple[str | None, bool, bool]
) -> None:
    env, _, _, _ = inputs(switch, *cell)

    def untouched(_: str) -> Any:
        raise AssertionError("a skipped build looks for nothing")

    assert nb.decide(env, untouched, untouched, untouched) == (
        False,
        f"{nb.SWITCH} says skip",
    )


@pytest.mark.parametrize("cell", MATRIX, ids=cell_id)
@pytest.mark.parametrize("switch", AUTO, ids=repr)
def test_auto_builds_only_with_every_part(
    switch: str | None, cell: tuple[str | None, bool, bool]
) -> None:
    toolkit, torch_npu, kernels = cell
    build, reason = run(switch, *cell)
    complete = toolkit is not None and torch_npu and kernels
    assert build is complete
    if complete:
        assert reason.startswith("detected: CANN at ")
        assert KERNEL_LIB in reason
        return
    assert reason.startswith("not detected, missing: ")
    assert ("the CANN toolkit" in reason) is (toolkit is None)
    assert ("torch_npu (not importable" in reason) is (not torch_npu)
    assert ("kernel library" in reason) is (not kernels)


@pytest.mark.parametrize("cell", MATRIX, ids=cell_id)
@pytest.mark.parametrize("switch", FORCE)
def test_force_builds_or_names_what_is_missing(
    switch: str, cell: tuple[str | None, bool, bool]
) -> None:
    toolkit, torch_npu, kernels = cell
    if toolkit is not None and torch_npu and kernels:
        build, reason = run(switch, *cell)
        assert build is True
        assert reason.startswith("forced: CANN at ")
        return
    with pytest.raises(nb.NativeBuildError) as info:
        run(switch, *cell)
    message = str(info.value)
    assert message.startswith(
        f"{nb.SWITCH}=1 forces the build of afd_plugin._C_ascend, but this "
        "machine lacks: "
    )
    assert ("the CANN toolkit" in message) is (toolkit is None)
    assert ("torch_npu (not importable" in message) is (not torch_npu)
    assert ("kernel library" in message) is (not kernels)
    assert f"Unset {nb.SWITCH} (or set it to 0)" in message


def test_forced_with_nothing_installed_says_what_to_install() -> None:
    with pytest.raises(nb.NativeBuildError) as info:
        run("1", None, False, False)
    message = str(info.value)
    for part in (
        *nb.TOOLKIT_ENV_VARS,
        nb.DEFAULT_TOOLKIT,
        "install CANN and source its set_env.sh",
        "--no-build-isolation",
        nb.KERNEL_LIBRARY_ENV,
        "csrc/npu/afd_cam_p2p_kernels.h",
        "not in this repository",
    ):
        assert part in message, part


@pytest.mark.parametrize("var", nb.TOOLKIT_ENV_VARS)
def test_each_toolkit_variable_is_found(var: str) -> None:
    env = {var: "/opt/x"}
    found = nb.detect_toolkit(env, {"/opt/x"}.__contains__, lambda _: None)
    assert found.cann == f"{var}=/opt/x"


def test_toolkit_variables_must_name_an_existing_directory() -> None:
    env = {var: f"/missing/{var}" for var in nb.TOOLKIT_ENV_VARS}
    env[nb.TOOLKIT_ENV_VARS[-1]] = "   "
    found = nb.detect_toolkit(env, lambda _: False, lambda _: None)
    assert found.cann is None
    # The default directory is the fallback.
    found = nb.detect_toolkit(env, {nb.DEFAULT_TOOLKIT}.__contains__, lambda _: None)
    assert found.cann == nb.DEFAULT_TOOLKIT


def test_the_first_variable_set_wins() -> None:
    first, second = nb.TOOLKIT_ENV_VARS[:2]
    env = {first: "/a", second: "/b"}
    assert nb.detect_toolkit(env, lambda _: True, lambda _: None).cann == (
        f"{first}=/a"
    )


def test_the_kernel_library_must_be_an_existing_file() -> None:
    env = {nb.KERNEL_LIBRARY_ENV: "/nowhere/lib.a"}
    found = nb.detect_toolkit(env, lambda _: False, lambda _: None, lambda _: False)
    assert found.kernel_library is None
    found = nb.detect_toolkit(env, lambda _: False, lambda _: None, lambda _: True)
    assert found.kernel_library == "/nowhere/lib.a"


@pytest.mark.parametrize("error", [ImportError, ValueError])
def test_a_broken_finder_counts_as_absent(error: type[Exception]) -> None:
    def find_spec(_: str) -> None:
        raise error("broken")

    assert nb.detect_toolkit({}, lambda _: False, find_spec).torch_npu is False


def test_this_machine_detects_nothing_and_skips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real finder and path checks on the CPU test machine."""
    if Path(nb.DEFAULT_TOOLKIT).is_dir() or importlib.util.find_spec("torch_npu"):
        pytest.skip("an Ascend toolkit is installed here")
    for var in (nb.SWITCH, nb.KERNEL_LIBRARY_ENV, *nb.TOOLKIT_ENV_VARS):
        monkeypatch.delenv(var, raising=False)
    build, reason = nb.decide()
    assert build is False
    assert reason.startswith("not detected, missing: the CANN toolkit")
    assert nb.describe(build, reason).startswith(
        "afd-plugin: not building the Ascend ops (afd_plugin._C_ascend): "
    )


def test_loads_by_path_without_the_package_or_anything_heavy() -> None:
    """What setup.py does before the package is installed: load the file by
    path, with torch and torch_npu unimportable, and decide."""
    script = f"""
import importlib.util, sys
for name in ("torch", "torch_npu", "vllm", "vllm_ascend", "afd_plugin"):
    sys.modules[name] = None
spec = importlib.util.spec_from_file_location(
    "_afd_native_build", {str(ROOT / "plugin/afd_plugin/native_build.py")!r}
)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
print(module.decide({{"AFD_BUILD_ASCEND_OPS": "0"}}))
print(module.decide({{}}, lambda _: False, importlib.util.find_spec)[0])
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["(False, 'AFD_BUILD_ASCEND_OPS says skip')", "False"]


def test_the_module_imports_only_the_standard_library() -> None:
    tree = ast.parse((ROOT / "plugin/afd_plugin/native_build.py").read_text())
    tops = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            tops.add((node.module or "").split(".")[0])
    assert tops <= set(sys.stdlib_module_names) | {"__future__"}, tops
