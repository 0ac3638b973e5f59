# SPDX-License-Identifier: Apache-2.0
"""Patch: the module-global block classes of vLLM's model files, while one
attention-role model is built (vLLM 0.32.0).

What: binds AFD stand-ins (``models/remote_ffn.RemoteFFN`` subclasses) to the
names vLLM's decoder layers build their MLP/MoE blocks with, for the duration
of one model's ``__init__``, then restores vLLM's classes (``swapped_names``).
Why: vLLM's decoder layers construct the FFN block by module-global name with
no hook to choose it, and the attention role must neither build nor load the
experts.
vLLM version: 0.32.0 (``TARGETS`` below; ``check_target`` fails on drift).
Delete when: vLLM's model classes accept a factory for their FFN blocks.
Applied: scoped, by the attention role models' constructors; never at
``register()``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

# vLLM model module -> block class name -> constructor parameters the AFD
# stand-in reads (it takes vLLM's keyword API and ignores the rest).
TARGETS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm.model_executor.models.deepseek_v2": {
        "DeepseekV2MoE": ("config", "prefix"),
        "DeepseekV2MLP": ("prefix",),
    },
    "vllm.model_executor.models.qwen3_moe": {
        "Qwen3MoeSparseMoeBlock": ("vllm_config", "prefix"),
        "Qwen3MoeMLP": ("prefix",),
    },
    # Qwen3-Next's decoder layer, and the MoE bookkeeping Qwen3.5 inherits
    # from it, name the block here; Qwen3.5's own decoder layer names its
    # import of the same class in qwen3_5.
    "vllm.model_executor.models.qwen3_next": {
        "Qwen3NextSparseMoeBlock": ("vllm_config", "prefix"),
        "Qwen3NextMLP": ("prefix",),
    },
    "vllm.model_executor.models.qwen3_5": {
        "Qwen3NextSparseMoeBlock": ("vllm_config", "prefix"),
    },
}


def _drift(module: ModuleType, names: dict[str, tuple[str, ...]]) -> list[str]:
    problems = []
    for name, wanted in names.items():
        cls = getattr(module, name, None)
        if not isinstance(cls, type):
            problems.append(f"{module.__name__} no longer defines class {name}")
            continue
        have = inspect.signature(cls.__init__).parameters
        missing = [p for p in wanted if p not in have]
        if missing:
            problems.append(f"{module.__name__}.{name}() lost parameters {missing}")
    return problems


def check_target() -> None:
    """Raise when the installed vLLM renamed or reshaped a target."""
    from vllm import __version__ as vllm_version

    problems = []
    for module_name, names in TARGETS.items():
        problems += _drift(importlib.import_module(module_name), names)
    if problems:
        raise RuntimeError(
            f"vLLM {vllm_version}: {'; '.join(problems)}; "
            "afd_plugin.patches.model_build_names needs an update"
        )


@contextmanager
def swapped_names(module: ModuleType, **replacements: Any) -> Iterator[None]:
    """Bind ``replacements`` in a vLLM model module while one role model is
    built, then restore them. Only ``TARGETS`` may be swapped; fails loudly
    when vLLM renamed one."""
    from vllm import __version__ as vllm_version

    listed = TARGETS.get(module.__name__, {})
    unlisted = sorted(set(replacements) - set(listed))
    if unlisted:
        raise ValueError(
            f"{module.__name__}: {unlisted} are not listed in "
            "afd_plugin.patches.model_build_names.TARGETS"
        )
    problems = _drift(module, {name: listed[name] for name in replacements})
    if problems:
        raise RuntimeError(
            f"vLLM {vllm_version}: {'; '.join(problems)}; the AFD model wrapper "
            "needs an update"
        )
    saved = {name: getattr(module, name) for name in replacements}
    try:
        for name, value in replacements.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
