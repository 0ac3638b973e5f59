# SPDX-License-Identifier: Apache-2.0
"""Patch: transformers' torchvision-only Qwen2-VL image-processor module, in a
process where torchvision is not installed (transformers 5.x, vLLM 0.32.0).

What: when ``torchvision`` cannot be imported, a module finder answers
``transformers.models.qwen2_vl.image_processing_qwen2_vl`` with its PIL twin
(``image_processing_pil_qwen2_vl``: the same ``smart_resize``, and
``Qwen2VLImageProcessor`` bound to ``Qwen2VLImageProcessorPil``, the class
transformers itself falls back to without torchvision).
Why: vLLM's ``qwen3_5.py`` imports the Qwen3-VL module even for the text-only
Qwen3.5/3.6 classes, and ``qwen3_vl.py`` imports ``smart_resize`` from that
module, which imports ``torchvision.transforms.v2`` at its top. The CPU
install removes torchvision (the registry's builds are CUDA ones and break
transformers there), so every Qwen3.5/3.6 server, AFD or colocated, failed
model inspection with "No module named 'torchvision'".
vLLM version: 0.32.0, with transformers 5.19 (``check_target`` fails when
the PIL twin or one of the names vLLM imports is gone).
Delete when: vLLM's Qwen3.5 text classes no longer import the Qwen3-VL module
at load, or that transformers module no longer needs torchvision.
Applied: at ``register()`` in every vLLM process (the colocated baseline of
an AFD deployment needs it as much as the roles do), before the AFD check,
and only when torchvision is absent; with torchvision installed it does
nothing. It imports nothing until that module is asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

TARGET = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
PIL_TWIN = "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl"
NAMES = ("smart_resize", "Qwen2VLImageProcessorKwargs")
"""Names the twin must keep (``smart_resize`` is what vLLM imports)."""


def torchvision_missing() -> bool:
    return importlib.util.find_spec("torchvision") is None


class _PilTwinLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        twin = importlib.import_module(PIL_TWIN)
        module = ModuleType(spec.name, twin.__doc__)
        module.__dict__.update(
            {k: v for k, v in vars(twin).items() if not k.startswith("__")}
        )
        module.Qwen2VLImageProcessor = twin.Qwen2VLImageProcessorPil  # type: ignore[attr-defined]
        module.__all__ = ["Qwen2VLImageProcessor"]  # type: ignore[attr-defined]
        module.__afd_pil_twin__ = PIL_TWIN  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


class PilTwinFinder(importlib.abc.MetaPathFinder):
    """Finds ``TARGET`` (and nothing else) as its PIL twin."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        return importlib.machinery.ModuleSpec(fullname, _PilTwinLoader())


def installed() -> bool:
    return any(isinstance(f, PilTwinFinder) for f in sys.meta_path)


def apply() -> None:
    """Install the finder where torchvision is absent; idempotent."""
    if not torchvision_missing() or installed():
        return
    sys.meta_path.insert(0, PilTwinFinder())


def check_target() -> None:
    """Raise when the installed transformers lost the twin or its names."""
    import transformers

    try:
        twin = importlib.import_module(PIL_TWIN)
    except ImportError as exc:
        raise RuntimeError(
            f"transformers {transformers.__version__}: {PIL_TWIN} is gone ({exc}); "
            "afd_plugin.patches.qwen_vl_image_processor needs an update"
        ) from None
    missing = [n for n in (*NAMES, "Qwen2VLImageProcessorPil") if not hasattr(twin, n)]
    if missing:
        raise RuntimeError(
            f"transformers {transformers.__version__}: {PIL_TWIN} lost {missing}; "
            "afd_plugin.patches.qwen_vl_image_processor needs an update"
        )
