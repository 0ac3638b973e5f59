"""``AFDAttentionCPUWorker``: vLLM's CPUWorker running the attention role.

Builds the connector (light) once vLLM's distributed state gives the rank.
"""

from __future__ import annotations

from typing import Any

from vllm.config import VllmConfig
from vllm.v1.worker.cpu_worker import CPUWorker

from afd_plugin.runtime.cpu.model_runners import AFDAttentionCPUModelRunner
from afd_plugin.runtime.role import build_connector, this_role_rank
from afd_plugin.runtime.role_worker import AFDRoleWorkerMixin, check_role_worker


class AFDAttentionCPUWorker(AFDRoleWorkerMixin, CPUWorker):
    """Attention role: scheduler, KV cache, sampler; FFN blocks are remote."""

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        # Every check that can fail runs before vLLM's worker set-up.
        self.afd = check_role_worker(vllm_config, "attention", type(self).__name__)
        super().__init__(vllm_config, *args, **kwargs)

    def init_device(self) -> None:
        super().init_device()
        rank = this_role_rank(self.vllm_config)
        self.afd_connector = build_connector(self.afd, rank)
        # Replaces the plain runner CPUWorker.init_device just built.
        self.model_runner = AFDAttentionCPUModelRunner(
            self.vllm_config, self.device, self.afd_connector
        )
