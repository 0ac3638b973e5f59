# SPDX-License-Identifier: Apache-2.0
"""afd-plugin: Attention-FFN Disaggregation for vLLM.

``register()`` is the ``vllm.general_plugins`` entry point; importing this
package is free (no torch, no vLLM).
"""

from __future__ import annotations

import logging

__version__ = "0.1.0"
__all__ = ["register", "register_environment_fixes", "__version__"]

logger = logging.getLogger("afd_plugin")

_registered = False


def register() -> None:
    """Install the plugin's vLLM patches once per process.

    vLLM calls this in the API server, the engine core and every worker. It is
    idempotent; the patches themselves act only when ``additional_config``
    holds an ``afd`` section, so a non-AFD vLLM sees no change beyond the
    environment fixes (``register_environment_fixes``).
    """
    global _registered
    if _registered:
        return
    _registered = True
    from afd_plugin import envs

    if envs.get("AFD_PLUGIN_DISABLE"):
        logger.warning("afd-plugin: AFD_PLUGIN_DISABLE is set; no patches applied")
        return
    register_environment_fixes()
    from afd_plugin import metrics_file
    from afd_plugin.patches import apply_patches

    # The server's first process names the directory its engine and workers
    # write AFD's counters to (afd_plugin.metrics_file); they inherit it.
    metrics_file.claim_directory()

    apply_patches()


def register_environment_fixes() -> None:
    """Apply the fixes any vLLM process of this environment needs, AFD or not
    (the ``afd_env`` entry point; ``register()`` calls it too): today, Qwen3.5
    and 3.6 model files importing where torchvision is absent
    (``patches/qwen_vl_image_processor.py``). Idempotent and cheap: each patch
    is applied once (``apply_patches`` remembers it)."""
    import importlib.util

    from afd_plugin import envs

    if envs.get("AFD_PLUGIN_DISABLE") or importlib.util.find_spec("vllm") is None:
        return  # nothing to fix for
    from afd_plugin.patches import ENVIRONMENT_PATCH_MODULES, apply_patches

    apply_patches(ENVIRONMENT_PATCH_MODULES)
