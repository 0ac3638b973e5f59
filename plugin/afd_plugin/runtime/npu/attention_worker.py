# SPDX-License-Identifier: Apache-2.0
"""``AFDAttentionNPUWorker``: vllm-ascend's NPUWorker running the attention
role (model runner V1)."""

from __future__ import annotations

from vllm_ascend.worker.worker import NPUWorker

from afd_plugin.runtime.npu.role_worker import AFDNPUWorkerMixin


class AFDAttentionNPUWorker(AFDNPUWorkerMixin, NPUWorker):
    """Attention role: scheduler, KV cache, sampler; FFN blocks are remote."""

    afd_role = "attention"

    def init_device(self) -> None:
        super().init_device()
        # Replaces the plain runner NPUWorker.init_device just built.
        from afd_plugin.runtime.npu.model_runners import AFDAttentionNPUModelRunner

        if self.use_v2_model_runner:
            raise NotImplementedError(
                "the AFD attention role on Ascend runs model runner V1; unset "
                "VLLM_USE_V2_MODEL_RUNNER"
            )
        self.model_runner = AFDAttentionNPUModelRunner(
            self.vllm_config, self.device, self.afd_build_connector()
        )
