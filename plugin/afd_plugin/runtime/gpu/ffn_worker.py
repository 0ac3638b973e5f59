# SPDX-License-Identifier: Apache-2.0
"""``AFDFFNGPUWorker``: vLLM's GPU Worker running the FFN role.

No KV cache, no scheduler work, no vLLM warm-up or capture of its own: after
the empty KV-cache set-up it meets the attention ranks and starts the daemon
that serves their steps (FFN graphs are captured when the attention side
captures).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.gpu_worker import Worker
from vllm.v1.worker.worker_base import CompilationTimes

from afd_plugin.runtime.role_worker import AFDFFNWorkerMixin


class AFDFFNGPUWorker(AFDFFNWorkerMixin, Worker):
    """FFN role: the blocks of every layer, served by a daemon thread."""

    def _make_model_runner(self) -> Any:
        connector = self.afd_build_connector()
        if self.use_v2_model_runner:
            from afd_plugin.runtime.gpu.model_runners_v2 import (
                AFDFFNGPUModelRunnerV2 as runner_cls,
            )
        else:
            from afd_plugin.runtime.gpu.model_runners import (
                AFDFFNGPUModelRunner as runner_cls,
            )
        return runner_cls(self.vllm_config, self.device, connector)

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """Nothing of vLLM's: the attention side's warm-up and capture steps
        warm up and capture the FFN side through the daemon."""
        return CompilationTimes(language_model=0.0, encoder=0.0)
