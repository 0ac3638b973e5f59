# SPDX-License-Identifier: Apache-2.0
"""Role-split model wrappers: each role builds and loads only its own modules.

The role runner picks the class from ``model_support`` (the one table of which
architecture this build splits) and builds it with vLLM's
``initialize_model(model_class=...)``; vLLM's ModelRegistry is left alone, so
non-AFD servers in the same environment are unaffected. The wrapper modules
import vLLM and are loaded lazily.
"""

from __future__ import annotations

import importlib

from afd_plugin.model_support import BUILT_ARCHITECTURES, role_model_target


def role_model_class(architecture: str, role: str) -> type:
    """The model class ``role`` builds for ``architecture``."""
    target = role_model_target(architecture, role)
    if target is None:
        raise RuntimeError(
            f"no AFD {role} model for architecture {architecture!r} in this "
            f"build; this build splits: {', '.join(BUILT_ARCHITECTURES)}"
        )
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)
