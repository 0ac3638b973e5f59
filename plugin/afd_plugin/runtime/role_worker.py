"""Checks every AFD role worker runs at construction, whatever selected it
(``auto`` or an explicit path): loud errors instead of guesses (AFD-I11).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from afd_plugin.config import AFDConfig
from afd_plugin.errors import AFDConfigError, FieldError
from afd_plugin.patches import require_patches
from afd_plugin.runtime.role import (
    current_platform_name,
    require_afd_config,
    validate_role,
)
from afd_plugin.version import check_vllm_version, installed_vllm_version

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger("afd_plugin")


def check_role_worker(vllm_config: VllmConfig, role: str, worker: str) -> AFDConfig:
    """The AFD config of this worker, after every check that can fail early."""
    afd = require_afd_config(vllm_config)
    require_patches()
    if afd.role != role:
        raise AFDConfigError(
            [
                FieldError(
                    "parallel_config.worker_cls",
                    f"{worker} runs the {role} role but "
                    f"additional_config.afd.role is {afd.role!r}; leave "
                    "--worker-cls unset ('auto')",
                )
            ]
        )
    installed = installed_vllm_version()
    warning = check_vllm_version(
        installed[1] if installed else None, afd.allow_unsupported_vllm_version
    )
    if warning:
        logger.warning("afd-plugin: %s", warning)
    validate_role(vllm_config, afd, current_platform_name())
    return afd
