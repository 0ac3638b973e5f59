# SPDX-License-Identifier: Apache-2.0
"""Whether ``afd_plugin._C_ascend`` (the Ascend CAM P2P binding in
``csrc/npu``) is built, and why: the ``AFD_BUILD_ASCEND_OPS`` switch, the
detection of what the build needs, and the one decision ``setup.py`` acts on.

Pure (standard library only, nothing heavy imported, ``torch_npu`` only looked
up, never imported): ``setup.py`` loads this file by path before the package
is installed, and the tests run its whole matrix on a CPU machine by passing
the environment, the directory check and the module finder in.

What the build needs, all three:

- the **CANN toolkit**: one of ``TOOLKIT_ENV_VARS`` naming an existing
  directory, or ``DEFAULT_TOOLKIT`` existing;
- **torch_npu**, findable by the Python that runs the build (so an Ascend
  build runs with ``--no-build-isolation``);
- the **kernel library**: ``KERNEL_LIBRARY_ENV`` naming an existing file that
  defines the launch functions ``csrc/npu/afd_cam_p2p_kernels.h`` declares.
  The AscendC kernels are not in this repository; without them the binding
  does not compile (its ``#error``), so the decision never starts a build
  that must fail.

The switch: ``1/true/yes/on`` forces the build (a missing part is an error
naming it, never a silent skip), ``0/false/no/off`` skips it, empty or unset
detects (builds only when all three are there; otherwise skips and says
why). Anything else is an error naming the allowed values.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SWITCH = "AFD_BUILD_ASCEND_OPS"
FORCE_VALUES = ("1", "true", "yes", "on")
SKIP_VALUES = ("0", "false", "no", "off")
TOOLKIT_ENV_VARS = (
    "ASCEND_HOME_PATH",
    "ASCEND_OPP_PATH",
    "ASCEND_TOOLKIT_HOME",
    "TORCH_NPU_PATH",
)
DEFAULT_TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"
KERNEL_LIBRARY_ENV = "AFD_ASCEND_KERNEL_LIB"
EXTENSION = "afd_plugin._C_ascend"
SOURCE_DIR = "csrc/npu"
SOURCES = ("csrc/npu/afd_ascend_ops.cpp",)
KERNELS_LINKED_MACRO = "AFD_CAM_P2P_KERNELS_LINKED"

PathCheck = Callable[[str], bool]
FindSpec = Callable[[str], Any]


class NativeBuildError(RuntimeError):
    """The Ascend ops build was forced but cannot run here."""


def parse_switch(raw: str | None) -> bool | None:
    """``True`` forces the build, ``False`` skips it, ``None`` (unset or
    empty) detects; anything else is a ``ValueError`` naming the allowed
    values."""
    value = (raw or "").strip().lower()
    if value == "":
        return None
    if value in FORCE_VALUES:
        return True
    if value in SKIP_VALUES:
        return False
    raise ValueError(
        f"{SWITCH}={value!r}: use {'/'.join(FORCE_VALUES)} (build the Ascend "
        f"ops), {'/'.join(SKIP_VALUES)} (skip them) or leave it empty (detect "
        "the toolkit)"
    )


def build_switch(environ: Mapping[str, str] | None = None) -> bool | None:
    """``parse_switch`` of ``AFD_BUILD_ASCEND_OPS`` in ``environ`` (default:
    the process environment)."""
    env = os.environ if environ is None else environ
    return parse_switch(env.get(SWITCH))


def _torch_npu_findable(find_spec: FindSpec) -> bool:
    try:
        return find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Toolkit:
    """What detection found; each field is ``None`` or ``False`` when absent."""

    cann: str | None
    """The toolkit directory and where it came from (``VAR=path`` or the
    default directory)."""
    torch_npu: bool
    """``torch_npu`` is findable by this Python (not imported)."""
    kernel_library: str | None
    """The prebuilt AscendC kernel library ``KERNEL_LIBRARY_ENV`` names."""

    def missing(self) -> list[str]:
        """What the build needs and this machine lacks, each with how to
        provide it."""
        out = []
        if self.cann is None:
            out.append(
                "the CANN toolkit (none of "
                f"{', '.join(TOOLKIT_ENV_VARS)} names an existing directory and "
                f"{DEFAULT_TOOLKIT} does not exist; install CANN and source its "
                "set_env.sh)"
            )
        if not self.torch_npu:
            out.append(
                "torch_npu (not importable by the Python running this build; "
                "install it, then build with --no-build-isolation so the build "
                "sees it)"
            )
        if self.kernel_library is None:
            out.append(
                f"the AscendC CAM P2P kernel library ({KERNEL_LIBRARY_ENV} must "
                "name an existing library defining the launch functions of "
                f"{SOURCE_DIR}/afd_cam_p2p_kernels.h; those kernels are not in "
                "this repository)"
            )
        return out


def detect_toolkit(
    environ: Mapping[str, str] | None = None,
    path_exists: PathCheck = os.path.isdir,
    find_spec: FindSpec = importlib.util.find_spec,
    file_exists: PathCheck = os.path.isfile,
) -> Toolkit:
    """Look for the three parts of the build; nothing is imported."""
    env = os.environ if environ is None else environ
    cann = None
    for var in TOOLKIT_ENV_VARS:
        path = env.get(var, "").strip()
        if path and path_exists(path):
            cann = f"{var}={path}"
            break
    if cann is None and path_exists(DEFAULT_TOOLKIT):
        cann = DEFAULT_TOOLKIT
    library = env.get(KERNEL_LIBRARY_ENV, "").strip()
    return Toolkit(
        cann=cann,
        torch_npu=_torch_npu_findable(find_spec),
        kernel_library=library if library and file_exists(library) else None,
    )


def decide(
    environ: Mapping[str, str] | None = None,
    path_exists: PathCheck = os.path.isdir,
    find_spec: FindSpec = importlib.util.find_spec,
    file_exists: PathCheck = os.path.isfile,
) -> tuple[bool, str]:
    """``(build, reason)`` for ``afd_plugin._C_ascend``. Raises ``ValueError``
    for an invalid switch and ``NativeBuildError`` when the build is forced
    and a part is missing."""
    switch = build_switch(environ)
    if switch is False:
        return False, f"{SWITCH} says skip"
    toolkit = detect_toolkit(environ, path_exists, find_spec, file_exists)
    missing = toolkit.missing()
    if not missing:
        how = "forced" if switch else "detected"
        return True, (
            f"{how}: CANN at {toolkit.cann}, torch_npu, kernel library "
            f"{toolkit.kernel_library}"
        )
    if switch:
        raise NativeBuildError(
            f"{SWITCH}=1 forces the build of {EXTENSION}, but this machine "
            f"lacks: {'; '.join(missing)}. Unset {SWITCH} (or set it to 0) to "
            "install without the Ascend ops."
        )
    return False, f"not detected, missing: {'; '.join(missing)}"


def describe(build: bool, reason: str) -> str:
    """The one line ``setup.py`` prints."""
    verdict = "building" if build else "not building"
    return f"afd-plugin: {verdict} the Ascend ops ({EXTENSION}): {reason}"
