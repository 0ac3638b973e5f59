# SPDX-License-Identifier: Apache-2.0
"""What every role runner shares, and how a role worker gets its rank and its
connector: this worker's role rank from vLLM's distributed state, the
connector built from the typed config (light: no groups, no sockets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from afd_plugin import metrics as afd_metrics
from afd_plugin.config import AFDConfig
from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.topology import role_rank

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

    from afd_plugin.connectors.base import AFDConnector


def this_role_rank(vllm_config: VllmConfig) -> int:
    """Role rank of this worker; needs vLLM's distributed state."""
    from vllm.distributed import get_tensor_model_parallel_rank

    parallel = vllm_config.parallel_config
    if parallel.pipeline_parallel_size != 1:
        raise NotImplementedError(
            "the AFD runtime splits every layer across roles and runs without "
            f"pipeline parallelism; got --pipeline-parallel-size "
            f"{parallel.pipeline_parallel_size}"
        )
    return role_rank(
        parallel.data_parallel_rank,
        get_tensor_model_parallel_rank(),
        parallel.tensor_parallel_size,
    )


class AFDRoleRunnerMixin:
    """Mixed in before a platform's vLLM model runner by both roles' runner
    mixins: takes the connector (and with it the typed AFD config). What no
    AFD role runner supports (LoRA, speculative decoding other than n-gram,
    pooling runners) never gets here: the deployment validator refuses it on
    both roles, naming the flag, before any model loads
    (``afd_plugin.serving_features``)."""

    afd_role: str
    """``attention`` or ``ffn``, set by each role's runner mixin."""
    afd_connector: AFDConnector

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        super().__init__(vllm_config, device)  # type: ignore[call-arg]
        self.afd_connector = connector
        afd_metrics.install(self.afd_role, connector.rank)

    @property
    def afd_config(self) -> AFDConfig:
        """The AFD config, parsed once by the worker and carried typed."""
        return self.afd_connector.config


def build_connector(afd: AFDConfig, rank: int) -> AFDConnector:
    """Construct (not initialise) this rank's connector: no groups, no sockets;
    its extra config comes parsed with ``afd``."""
    cls = AFDConnectorFactory.load_class(afd.connector)
    return cls(afd, rank)
