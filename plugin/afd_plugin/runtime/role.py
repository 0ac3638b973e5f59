"""What a role process derives from vLLM's config: the AFD config, the
deployment the one validator checks, this worker's role rank, its connector.

Shared by the config patch and the role workers of every platform.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from afd_plugin.config import AFDConfig, parse_afd_config
from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.topology import role_rank
from afd_plugin.validation import Deployment, validate_deployment

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

    from afd_plugin.connectors.base import AFDConnector

logger = logging.getLogger("afd_plugin")

# vLLM platform device types -> AFD platform names.
PLATFORMS: dict[str, str] = {"cpu": "cpu", "cuda": "cuda", "npu": "npu"}


def current_platform_name() -> str:
    from vllm.platforms import current_platform

    device_type = current_platform.device_type
    try:
        return PLATFORMS[device_type]
    except KeyError:
        raise RuntimeError(
            f"AFD does not support the vLLM platform {device_type!r}; "
            f"supported: {', '.join(PLATFORMS)}"
        ) from None


def require_afd_config(vllm_config: VllmConfig) -> AFDConfig:
    """The AFD config of a process that must be an AFD role."""
    afd = parse_afd_config(vllm_config.additional_config)
    if afd is None:
        raise RuntimeError(
            "an AFD role worker or model runs but additional_config has no 'afd' "
            "section; pass --additional-config '{\"afd\": {...}}' or drop the AFD "
            "--worker-cls"
        )
    return afd


def graph_mode_of(vllm_config: VllmConfig) -> str:
    if vllm_config.model_config is not None and vllm_config.model_config.enforce_eager:
        return "eager"
    mode = vllm_config.compilation_config.cudagraph_mode
    name = getattr(mode, "name", str(mode))
    return "eager" if name == "NONE" else name


def deployment_of(
    vllm_config: VllmConfig, platform: str, enable_dbo: bool | None = None
) -> Deployment:
    """The validator's view of this server. ``enable_dbo`` overrides the config
    when a platform silently turned off what the user asked for."""
    parallel = vllm_config.parallel_config
    model_config = vllm_config.model_config
    architectures = getattr(model_config.hf_config, "architectures", None) or [""]
    dbo = parallel.enable_dbo if enable_dbo is None else enable_dbo
    return Deployment(
        platform=platform,  # type: ignore[arg-type]
        architecture=architectures[0],
        model_runner="v2" if vllm_config.use_v2_model_runner else "v1",
        graph_mode=graph_mode_of(vllm_config),
        dp=parallel.data_parallel_size,
        tp=parallel.tensor_parallel_size,
        pp=parallel.pipeline_parallel_size,
        pcp=parallel.prefill_context_parallel_size,
        dcp=parallel.decode_context_parallel_size,
        enable_expert_parallel=parallel.enable_expert_parallel,
        enable_eplb=parallel.enable_eplb,
        enable_dbo=dbo,
        num_ubatches=parallel.ubatch_size if parallel.ubatch_size > 1 else 2,
    )


def validate_role(
    vllm_config: VllmConfig, afd: AFDConfig, platform: str, **overrides: bool
) -> Deployment:
    """Run the one deployment validator (both roles) on this server."""
    deployment = deployment_of(vllm_config, platform, **overrides)
    validate_deployment(afd, deployment)
    return deployment


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
    mixins: takes the connector, and refuses what no AFD role runner supports
    on any platform, LoRA and speculative decoding (the layers are split
    across servers)."""

    afd_role: str
    """``attention`` or ``ffn``, set by each role's runner mixin."""
    afd_connector: AFDConnector

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        super().__init__(vllm_config, device)  # type: ignore[call-arg]
        if self.lora_config:  # type: ignore[attr-defined]
            raise ValueError(f"AFD {self.afd_role} role: LoRA is not supported")
        if self.speculative_config is not None:  # type: ignore[attr-defined]
            raise ValueError(
                f"AFD {self.afd_role} role: speculative decoding is not supported"
            )
        self.afd_connector = connector


def build_connector(afd: AFDConfig, rank: int) -> AFDConnector:
    """Construct (not initialise) this rank's connector: no groups, no sockets."""
    extra = AFDConnectorFactory.parse_extra_config(
        afd.connector, afd.connector_extra_config
    )
    cls = AFDConnectorFactory.load_class(afd.connector)
    return cls(afd, rank, extra)
