"""``AFDAttentionGPUWorker``: vLLM's GPU Worker running the attention role,
with the AFD runner for model runner V1 or V2 (whichever vLLM selected).
"""

from __future__ import annotations

from typing import Any

from vllm.config import VllmConfig
from vllm.v1.worker.gpu_worker import Worker

from afd_plugin.runtime.role import build_connector, this_role_rank
from afd_plugin.runtime.role_worker import AFDRoleWorkerMixin, check_role_worker


class AFDAttentionGPUWorker(AFDRoleWorkerMixin, Worker):
    """Attention role: scheduler, KV cache, sampler; FFN blocks are remote."""

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        # Every check that can fail runs before vLLM's worker set-up.
        self.afd = check_role_worker(vllm_config, "attention", type(self).__name__)
        super().__init__(vllm_config, *args, **kwargs)

    def _make_model_runner(self) -> Any:
        # Called by init_device once distributed state gives the rank.
        self.afd_connector = build_connector(self.afd, this_role_rank(self.vllm_config))
        if self.use_v2_model_runner:
            from afd_plugin.runtime.gpu.model_runners_v2 import (
                AFDAttentionGPUModelRunnerV2 as runner_cls,
            )
        else:
            from afd_plugin.runtime.gpu.model_runners import (
                AFDAttentionGPUModelRunner as runner_cls,
            )
        return runner_cls(self.vllm_config, self.device, self.afd_connector)
