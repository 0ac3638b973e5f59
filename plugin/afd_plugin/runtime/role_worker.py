# SPDX-License-Identifier: Apache-2.0
"""What every platform's AFD role worker shares: the checks it runs at
construction, whatever selected it (``auto`` or an explicit path: loud errors
instead of guesses, AFD-I11), and the connector and FFN-daemon lifecycle.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from afd_plugin import envs
from afd_plugin.config import AFDConfig
from afd_plugin.errors import AFDConfigError, FieldError
from afd_plugin.patches import require_patches
from afd_plugin.runtime.ffn_daemon import FFNDaemon
from afd_plugin.runtime.role import build_connector, this_role_rank
from afd_plugin.vllm_view import require_afd_config

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

    from afd_plugin.connectors.base import AFDConnector

logger = logging.getLogger("afd_plugin")
_STANDBY_STOP_S = 3.0


def check_role_worker(vllm_config: VllmConfig, role: str, worker: str) -> AFDConfig:
    """The AFD config of this worker (the one parse of this process's worker;
    runner, connector and models get it typed), after every check that can
    fail early: an ``afd`` section, the applied patches, the role."""
    afd = require_afd_config(vllm_config)
    require_patches()
    if afd.role != role:
        raise AFDConfigError(
            [
                FieldError(
                    "parallel_config.worker_cls",
                    f"{worker} runs the {role} role but "
                    f"additional_config.afd.role is {afd.role!r}; leave "
                    "--worker-cls unset ('auto')",
                )
            ]
        )
    # The deployment validator and the vLLM version check already ran in the
    # config patch, which require_patches() guarantees was applied.
    return afd


class AFDRoleWorkerMixin:
    """Mixed in before a platform's vLLM worker: checks the role before vLLM's
    worker set-up, owns the connector (and, on the FFN role, the daemon) and
    releases them at shutdown."""

    afd_role: str
    """``attention`` or ``ffn``, set by each role's worker."""
    afd_connector: AFDConnector | None = None
    afd_daemon: FFNDaemon | None = None
    vllm_config: VllmConfig

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        # Every check that can fail runs before vLLM's worker set-up.
        self.afd = check_role_worker(vllm_config, self.afd_role, type(self).__name__)
        switch_us = envs.get("AFD_SWITCH_INTERVAL_US")
        if switch_us is not None:
            sys.setswitchinterval(switch_us * 1e-6)
            logger.info("afd-plugin: thread switch interval %.0f us", switch_us)
        super().__init__(vllm_config, *args, **kwargs)  # type: ignore[call-arg]

    def afd_build_connector(self) -> AFDConnector:
        """This rank's connector, constructed (light: no groups, no sockets)
        once vLLM's distributed state gives the rank."""
        self.afd_connector = build_connector(self.afd, this_role_rank(self.vllm_config))
        return self.afd_connector

    def shutdown(self) -> None:
        if self.afd_daemon is not None:
            # A waiting standby polls: let it end, so that it leaves in order
            # (the host reports a standby that just vanished as lost).
            waiting = self.afd_connector is not None and (
                self.afd_connector.waiting_standby
            )
            self.afd_daemon.stop(timeout=_STANDBY_STOP_S if waiting else 0.0)
        if self.afd_connector is not None and (
            self.afd_daemon is None or not self.afd_daemon.alive
        ):
            # A daemon blocked in an idle receive keeps the groups until exit.
            self.afd_connector.close()
        super().shutdown()  # type: ignore[misc]


class AFDFFNWorkerMixin(AFDRoleWorkerMixin):
    """The FFN role's worker: no KV cache, no scheduler work; after the empty
    KV-cache set-up it meets the attention ranks and starts the daemon."""

    afd_role = "ffn"
    model_runner: Any

    def initialize_from_config(self, kv_cache_config: KVCacheConfig) -> None:
        super().initialize_from_config(kv_cache_config)  # type: ignore[misc]
        assert self.afd_connector is not None
        self.afd_connector.init_afd_connector()  # AFD-I3: before the daemon
        self.afd_daemon = FFNDaemon(
            self.afd_connector,
            self.model_runner.afd_serve_step,
            self._afd_daemon_exit,
            graphs=self.model_runner.afd_graphs,
            serve_dispatch=self.model_runner.afd_serve_dispatch,
        )
        self.afd_daemon.start()

    def _afd_daemon_exit(self, error: BaseException | None) -> None:
        """The attention ranks left or failed: this FFN server has nothing left
        to serve, so its engine stops (and with it the server)."""
        if error is not None:
            logger.error("afd-plugin: FFN server stops: %s", error)
        else:
            logger.info("afd-plugin: FFN server stops: its attention ranks left")
        os.kill(os.getpid(), signal.SIGTERM)
