# SPDX-License-Identifier: Apache-2.0
"""What both Ascend role workers add before vllm-ascend's NPUWorker: the
Ascend feature checks and the non-SP all-to-all fix, at construction, however
the worker was chosen (an explicit worker path skips the config patch's copy
of the fix, AFD-I11)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from afd_plugin.compat.npu.feature_validation import validate_ascend_features
from afd_plugin.compat.npu.runtime_config import apply_non_sp_all2all
from afd_plugin.runtime.role_worker import AFDRoleWorkerMixin
from afd_plugin.vllm_view import require_afd_config

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger("afd_plugin")


class AFDNPUWorkerMixin(AFDRoleWorkerMixin):
    """Checks and fixes before vllm-ascend's worker set-up."""

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        afd = require_afd_config(vllm_config)
        dtype = str(vllm_config.model_config.dtype).removeprefix("torch.")
        validate_ascend_features(afd, dtype)
        if apply_non_sp_all2all(vllm_config):
            logger.info("afd-plugin: non-SP all-to-all fix applied in the worker")
        super().__init__(vllm_config, *args, **kwargs)
