"""``AFDFFNGPUWorker``: vLLM's GPU Worker running the FFN role.

No KV cache, no scheduler work, no vLLM warm-up or capture of its own: after
the empty KV-cache set-up it meets the attention ranks and starts the daemon
that serves their steps (FFN graphs are captured when the attention side
captures).
"""

from __future__ import annotations

from typing import Any

from vllm.config import VllmConfig
from vllm.v1.worker.gpu_worker import Worker
from vllm.v1.worker.worker_base import CompilationTimes

from afd_plugin.runtime.role import build_connector, this_role_rank
from afd_plugin.runtime.role_worker import AFDFFNWorkerMixin, check_role_worker


class AFDFFNGPUWorker(AFDFFNWorkerMixin, Worker):
    """FFN role: the blocks of every layer, served by a daemon thread."""

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        # Every check that can fail runs before vLLM's worker set-up.
        self.afd = check_role_worker(vllm_config, "ffn", type(self).__name__)
        super().__init__(vllm_config, *args, **kwargs)

    def _make_model_runner(self) -> Any:
        self.afd_connector = build_connector(self.afd, this_role_rank(self.vllm_config))
        if self.use_v2_model_runner:
            from afd_plugin.runtime.gpu.model_runners_v2 import (
                AFDFFNGPUModelRunnerV2 as runner_cls,
            )
        else:
            from afd_plugin.runtime.gpu.model_runners import (
                AFDFFNGPUModelRunner as runner_cls,
            )
        return runner_cls(self.vllm_config, self.device, self.afd_connector)

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """Nothing of vLLM's: the attention side's warm-up and capture steps
        warm up and capture the FFN side through the daemon."""
        return CompilationTimes(language_model=0.0, encoder=0.0)
