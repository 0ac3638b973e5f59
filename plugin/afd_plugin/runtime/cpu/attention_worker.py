# SPDX-License-Identifier: Apache-2.0
"""``AFDAttentionCPUWorker``: vLLM's CPUWorker running the attention role.

Builds the connector (light) once vLLM's distributed state gives the rank.
"""

from __future__ import annotations

from vllm.v1.worker.cpu_worker import CPUWorker

from afd_plugin.runtime.cpu.model_runners import AFDAttentionCPUModelRunner
from afd_plugin.runtime.role_worker import AFDRoleWorkerMixin


class AFDAttentionCPUWorker(AFDRoleWorkerMixin, CPUWorker):
    """Attention role: scheduler, KV cache, sampler; FFN blocks are remote."""

    afd_role = "attention"

    def init_device(self) -> None:
        super().init_device()
        # Replaces the plain runner CPUWorker.init_device just built.
        self.model_runner = AFDAttentionCPUModelRunner(
            self.vllm_config, self.device, self.afd_build_connector()
        )
