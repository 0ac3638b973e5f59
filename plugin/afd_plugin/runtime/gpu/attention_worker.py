# SPDX-License-Identifier: Apache-2.0
"""``AFDAttentionGPUWorker``: vLLM's GPU Worker running the attention role,
with the AFD runner for model runner V1 or V2 (whichever vLLM selected).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.gpu_worker import Worker

from afd_plugin.runtime.role_worker import AFDRoleWorkerMixin


class AFDAttentionGPUWorker(AFDRoleWorkerMixin, Worker):
    """Attention role: scheduler, KV cache, sampler; FFN blocks are remote."""

    afd_role = "attention"

    def _make_model_runner(self) -> Any:
        # Called by init_device once distributed state gives the rank.
        connector = self.afd_build_connector()
        if self.use_v2_model_runner:
            from afd_plugin.runtime.gpu.model_runners_v2 import (
                AFDAttentionGPUModelRunnerV2 as runner_cls,
            )
        else:
            from afd_plugin.runtime.gpu.model_runners import (
                AFDAttentionGPUModelRunner as runner_cls,
            )
        return runner_cls(self.vllm_config, self.device, connector)
