# SPDX-License-Identifier: Apache-2.0
"""The build step pyproject.toml cannot express: whether to build the native
Ascend library ``afd_plugin._C_ascend`` (``csrc/npu``).

Metadata (name, version, dependencies, packages, entry points) stays in
pyproject.toml; this file adds only ``ext_modules`` and ``cmdclass``. The
decision is ``afd_plugin.native_build.decide()``, loaded by file path (the
package is not installed yet). When it says no, nothing is compiled and no
compiler, torch or torch_npu is needed: the wheel is pure Python. When it
says yes, torch_npu's ``NpuExtension`` builds the binding and links the
kernel library ``AFD_ASCEND_KERNEL_LIB`` names.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import setup

ROOT = Path(__file__).resolve().parent


def load_native_build() -> ModuleType:
    path = ROOT / "plugin" / "afd_plugin" / "native_build.py"
    spec = importlib.util.spec_from_file_location("_afd_native_build", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def ascend_extension(native_build: ModuleType) -> dict[str, Any]:
    """``ext_modules`` and ``cmdclass`` for ``afd_plugin._C_ascend``; torch and
    torch_npu are imported only here, when the build was decided."""
    from torch.utils.cpp_extension import BuildExtension
    from torch_npu.utils.cpp_extension import NpuExtension

    absent = [s for s in native_build.SOURCES if not (ROOT / s).is_file()]
    if absent:
        raise native_build.NativeBuildError(
            f"building {native_build.EXTENSION} needs {', '.join(absent)}, "
            "which this source tree lacks"
        )
    toolkit = native_build.detect_toolkit()
    extension = NpuExtension(
        native_build.EXTENSION,
        list(native_build.SOURCES),
        include_dirs=[str(ROOT / native_build.SOURCE_DIR)],
        define_macros=[(native_build.KERNELS_LINKED_MACRO, "1")],
        extra_objects=[toolkit.kernel_library],
    )
    return {"ext_modules": [extension], "cmdclass": {"build_ext": BuildExtension}}


def main() -> None:
    native_build = load_native_build()
    build, reason = native_build.decide()
    print(native_build.describe(build, reason), file=sys.stderr)
    setup(**(ascend_extension(native_build) if build else {"ext_modules": []}))


main()
