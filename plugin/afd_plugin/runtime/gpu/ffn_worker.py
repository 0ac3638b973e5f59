"""``AFDFFNGPUWorker``: vLLM's GPU Worker running the FFN role.

No KV cache, no scheduler work, no vLLM warm-up or capture of its own: after
the empty KV-cache set-up it meets the attention ranks and starts the daemon
that serves their steps (FFN graphs are captured when the attention side
captures).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from vllm.config import VllmConfig
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu_worker import Worker
from vllm.v1.worker.worker_base import CompilationTimes

from afd_plugin.runtime.ffn_daemon import FFNDaemon
from afd_plugin.runtime.role import build_connector, this_role_rank
from afd_plugin.runtime.role_worker import check_role_worker

logger = logging.getLogger("afd_plugin")


class AFDFFNGPUWorker(Worker):
    """FFN role: the blocks of every layer, served by a daemon thread."""

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        # Every check that can fail runs before vLLM's worker set-up.
        self.afd = check_role_worker(vllm_config, "ffn", type(self).__name__)
        self.afd_connector = None
        self.afd_daemon: FFNDaemon | None = None
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

    def initialize_from_config(self, kv_cache_config: KVCacheConfig) -> None:
        super().initialize_from_config(kv_cache_config)  # empty: no attention here
        assert self.afd_connector is not None
        self.afd_connector.init_afd_connector()  # AFD-I3: before the daemon
        self.afd_daemon = FFNDaemon(
            self.afd_connector,
            self.model_runner.afd_serve_step,
            self._daemon_exit,
            graphs=self.model_runner.afd_graphs,
        )
        self.afd_daemon.start()

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """Nothing of vLLM's: the attention side's warm-up and capture steps
        warm up and capture the FFN side through the daemon."""
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def _daemon_exit(self, error: BaseException | None) -> None:
        """The attention ranks left or failed: this FFN server has nothing left
        to serve, so its engine stops (and with it the server)."""
        if error is not None:
            logger.error("afd-plugin: FFN server stops: %s", error)
        else:
            logger.info("afd-plugin: FFN server stops: its attention ranks left")
        os.kill(os.getpid(), signal.SIGTERM)

    def shutdown(self) -> None:
        if self.afd_daemon is not None:
            self.afd_daemon.stop()
        if self.afd_connector is not None and (
            self.afd_daemon is None or not self.afd_daemon.alive
        ):
            # A daemon blocked in an idle receive keeps the groups until exit.
            self.afd_connector.close()
        super().shutdown()
