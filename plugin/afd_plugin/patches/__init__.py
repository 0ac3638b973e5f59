# SPDX-License-Identifier: Apache-2.0
"""Every vLLM monkey-patch of the plugin, one file per patched target, each with
its What / Why / vLLM version / Delete when header and a ``check_target()``
that fails when vLLM's target changed.

Process-wide patches are applied from ``register()`` only; a failure is logged
at WARNING and remembered so that an AFD process refuses to start instead of
running unpatched. Scoped patches are applied by the runtime at one point
(named in their header) and never at ``register()``.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging

logger = logging.getLogger("afd_plugin")

# Process-wide patches in application order; each exposes ``apply() -> None``.
PATCH_MODULES: tuple[str, ...] = ("afd_plugin.patches.config_validation",)

# Environment fixes: what any vLLM process of this environment needs, AFD or
# not (a colocated baseline too); applied by ``register_environment_fixes()``,
# the ``afd_env`` entry point, and by ``register()``.
ENVIRONMENT_PATCH_MODULES: tuple[str, ...] = (
    "afd_plugin.patches.qwen_vl_image_processor",
)

# Patches the runtime applies itself, at the point their header names.
SCOPED_PATCH_MODULES: tuple[str, ...] = (
    "afd_plugin.patches.model_build_names",
    "afd_plugin.patches.startup_interrupt",
    "afd_plugin.patches.v2_run_fullgraph",
)

ALL_PATCH_MODULES: tuple[str, ...] = (
    PATCH_MODULES + ENVIRONMENT_PATCH_MODULES + SCOPED_PATCH_MODULES
)
"""Every patch module; each exposes ``check_target() -> None``."""

applied: list[str] = []
failed: dict[str, str] = {}


def apply_patches(modules: tuple[str, ...] | None = None) -> None:
    """Apply every patch once; never hide a failure below WARNING. Without
    vLLM in the process there is nothing to patch: nothing is applied (and an
    AFD role then refuses to start, ``require_patches``)."""
    if modules is None:
        if importlib.util.find_spec("vllm") is None:
            logger.debug("afd-plugin: vLLM is not installed; no patch applied")
            return
        modules = PATCH_MODULES
    for name in modules:
        if name in applied or name in failed:
            continue
        try:
            importlib.import_module(name).apply()
        except Exception as exc:  # recorded, logged loudly, re-raised for AFD
            failed[name] = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "afd-plugin: patch %s failed: %s", name, failed[name], exc_info=True
            )
        else:
            applied.append(name)


def require_patches(modules: tuple[str, ...] | None = None) -> None:
    """Called where an AFD role starts: refuse to run unless every process-wide
    patch was applied in this process."""
    wanted = PATCH_MODULES if modules is None else modules
    missing = [m for m in wanted if m not in applied]
    if not missing:
        return
    reasons = [
        f"{m} ({failed[m]})"
        if m in failed
        else f"{m} (not applied: register() "
        "did not run in this process; is VLLM_PLUGINS excluding 'afd'?)"
        for m in missing
    ]
    raise RuntimeError(
        "afd-plugin cannot run AFD: these vLLM patches are missing: "
        + "; ".join(reasons)
    )
