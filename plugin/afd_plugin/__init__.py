# SPDX-License-Identifier: Apache-2.0
"""afd-plugin: Attention-FFN Disaggregation for vLLM.

``register()`` is the ``vllm.general_plugins`` entry point; importing this
package is free (no torch, no vLLM).
"""

from __future__ import annotations

import logging

__version__ = "0.1.0"
__all__ = ["register", "__version__"]

logger = logging.getLogger("afd_plugin")

_registered = False


def register() -> None:
    """Install the plugin's vLLM patches once per process.

    vLLM calls this in the API server, the engine core and every worker. It is
    idempotent; the patches themselves act only when ``additional_config``
    holds an ``afd`` section, so a non-AFD vLLM sees no change.
    """
    global _registered
    if _registered:
        return
    _registered = True
    from afd_plugin import envs

    if envs.get("AFD_PLUGIN_DISABLE"):
        logger.warning("afd-plugin: AFD_PLUGIN_DISABLE is set; no patches applied")
        return
    from afd_plugin.patches import apply_patches

    apply_patches()
