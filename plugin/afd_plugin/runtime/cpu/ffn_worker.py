"""``AFDFFNCPUWorker``: vLLM's CPUWorker running the FFN role.

No KV cache, no scheduler work: after the empty KV-cache set-up it meets the
attention ranks and starts the daemon that serves their steps.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from vllm.config import VllmConfig
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.cpu_worker import CPUWorker

from afd_plugin.runtime.cpu.model_runners import AFDFFNCPUModelRunner
from afd_plugin.runtime.ffn_daemon import FFNDaemon
from afd_plugin.runtime.role import build_connector, this_role_rank
from afd_plugin.runtime.role_worker import check_role_worker

logger = logging.getLogger("afd_plugin")


class AFDFFNCPUWorker(CPUWorker):
    """FFN role: the blocks of every layer, served by a daemon thread."""

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        # Every check that can fail runs before vLLM's worker set-up.
        self.afd = check_role_worker(vllm_config, "ffn", type(self).__name__)
        super().__init__(vllm_config, *args, **kwargs)
        self.afd_connector = None
        self.afd_daemon: FFNDaemon | None = None

    def init_device(self) -> None:
        super().init_device()
        rank = this_role_rank(self.vllm_config)
        self.afd_connector = build_connector(self.afd, rank)
        # Replaces the plain runner CPUWorker.init_device just built.
        self.model_runner = AFDFFNCPUModelRunner(
            self.vllm_config, self.device, self.afd_connector
        )

    def initialize_from_config(self, kv_cache_config: KVCacheConfig) -> None:
        super().initialize_from_config(kv_cache_config)  # empty: no attention here
        assert self.afd_connector is not None
        self.afd_connector.init_afd_connector()  # AFD-I3: before the daemon
        self.afd_daemon = FFNDaemon(
            self.afd_connector, self.model_runner.afd_serve_step, self._daemon_exit
        )
        self.afd_daemon.start()

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
            # A daemon blocked in an idle receive keeps the group until exit.
            self.afd_connector.close()
        super().shutdown()
