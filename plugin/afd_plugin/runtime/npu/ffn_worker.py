# SPDX-License-Identifier: Apache-2.0
"""``AFDFFNNPUWorker``: vllm-ascend's NPUWorker running the FFN role.

No KV cache, no scheduler work, no vLLM warm-up or capture of its own: after
the empty KV-cache set-up it meets the attention ranks and starts the daemon
(``AFDFFNWorkerMixin.initialize_from_config``).
"""

from __future__ import annotations

from vllm.v1.worker.worker_base import CompilationTimes
from vllm_ascend.worker.worker import NPUWorker

from afd_plugin.runtime.npu.role_worker import AFDNPUWorkerMixin
from afd_plugin.runtime.role_worker import AFDFFNWorkerMixin


class AFDFFNNPUWorker(AFDNPUWorkerMixin, AFDFFNWorkerMixin, NPUWorker):
    """FFN role: the blocks of every layer, served by a daemon thread."""

    def init_device(self) -> None:
        super().init_device()
        from afd_plugin.runtime.npu.model_runners import (
            AFDFFNNPUModelRunner,
            AFDFFNNPUModelRunnerV2,
        )

        runner_cls = (
            AFDFFNNPUModelRunnerV2 if self.use_v2_model_runner else AFDFFNNPUModelRunner
        )
        self.model_runner = runner_cls(
            self.vllm_config, self.device, self.afd_build_connector()
        )

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """Nothing of vLLM's: the attention side's warm-up and capture steps
        reach the FFN side through the daemon."""
        return CompilationTimes(language_model=0.0, encoder=0.0)
