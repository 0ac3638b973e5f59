"""Version-scoped vLLM patches, one file per patched target, applied from
``register()`` only. A failure is logged at WARNING and remembered so that an
AFD process refuses to start instead of running unpatched."""

from __future__ import annotations

import importlib
import logging

logger = logging.getLogger("afd_plugin")

# Patch modules in application order; each exposes ``apply() -> None``.
PATCH_MODULES: tuple[str, ...] = ("afd_plugin.patches.config_validation",)

applied: list[str] = []
failed: dict[str, str] = {}


def apply_patches(modules: tuple[str, ...] | None = None) -> None:
    """Apply every patch once; never hide a failure below WARNING."""
    for name in PATCH_MODULES if modules is None else modules:
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


def require_patches() -> None:
    """Called where an AFD role starts: refuse to run with a patch missing."""
    if failed:
        details = "; ".join(f"{k} ({v})" for k, v in failed.items())
        raise RuntimeError(
            f"afd-plugin cannot run AFD: these vLLM patches failed to apply: {details}"
        )
