# SPDX-License-Identifier: Apache-2.0
"""What a role process reads from vLLM's config: its platform, its AFD config
(parsed once per worker) and the deployment the one validator checks.

Shared by the config patch and the runtime; imports vLLM only inside
``current_platform_name`` (the rest reads attributes of the config it is given).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from afd_plugin.config import AFDConfig, parse_afd_config
from afd_plugin.validation import Deployment, validate_deployment

if TYPE_CHECKING:
    from vllm.config import VllmConfig

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
    speculative = vllm_config.speculative_config
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
        lora=vllm_config.lora_config is not None,
        speculative_method=speculative.method if speculative is not None else None,
        runner_type=model_config.runner_type,
        convert_type=model_config.convert_type,
    )


def validate_role(
    vllm_config: VllmConfig, afd: AFDConfig, platform: str, **overrides: bool
) -> Deployment:
    """Run the one deployment validator (both roles) on this server."""
    deployment = deployment_of(vllm_config, platform, **overrides)
    validate_deployment(afd, deployment)
    return deployment
