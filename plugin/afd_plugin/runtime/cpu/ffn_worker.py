# SPDX-License-Identifier: Apache-2.0
"""``AFDFFNCPUWorker``: vLLM's CPUWorker running the FFN role.

No KV cache, no scheduler work: after the empty KV-cache set-up it meets the
attention ranks and starts the daemon that serves their steps
(``AFDFFNWorkerMixin``).
"""

from __future__ import annotations

from vllm.v1.worker.cpu_worker import CPUWorker

from afd_plugin.runtime.cpu.model_runners import AFDFFNCPUModelRunner
from afd_plugin.runtime.role_worker import AFDFFNWorkerMixin


class AFDFFNCPUWorker(AFDFFNWorkerMixin, CPUWorker):
    """FFN role: the blocks of every layer, served by a daemon thread."""

    def init_device(self) -> None:
        super().init_device()
        # Replaces the plain runner CPUWorker.init_device just built.
        self.model_runner = AFDFFNCPUModelRunner(
            self.vllm_config, self.device, self.afd_build_connector()
        )
