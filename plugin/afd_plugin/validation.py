# SPDX-License-Identifier: Apache-2.0
"""The one deployment validator shared by both roles and the harness.

``validate_deployment`` enforces AFD-I7 (gate placement by connector x runner x
model), AFD-I8 (model runner V2 pairing), graph modes per platform, DBO, the
rank rules, the serving features AFD refuses, and that this build holds the
connector, the role workers and the role-split model. Pure: no torch, no vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.registry import AFDConnectorFactory, Platform
from afd_plugin.errors import AFDConfigError, FieldError
from afd_plugin.graph_policy import GRAPH_MODES, validate_cuda_graph_mode
from afd_plugin.model_support import (
    BUILT_ARCHITECTURES,
    SUPPORTED_ARCHITECTURES,
    family_of,
)
from afd_plugin.serving_features import (
    DRAFT_SPECULATION,
    LORA,
    POOLING,
    SPECULATIVE_METHODS_ALLOWED,
    ServingFeature,
)
from afd_plugin.worker_selection import (
    AUTO_WORKERS,
    worker_in_build,
    worker_not_in_build,
)

ModelRunner = Literal["v1", "v2"]

AFD = "additional_config.afd"
DEP = "deployment"


@dataclass(frozen=True)
class Deployment:
    """How one role server is launched, as far as AFD rules care.

    The runtime fills it from vLLM's config; the harness from a scenario.
    """

    platform: Platform
    architecture: str
    model_runner: ModelRunner = "v1"
    graph_mode: str = "eager"
    dp: int = 1
    tp: int = 1
    pp: int = 1
    pcp: int = 1
    dcp: int = 1
    enable_expert_parallel: bool = False
    enable_eplb: bool = False
    enable_dbo: bool = False
    num_ubatches: int = 2
    """Micro-batches per DBO step (vLLM's ``--ubatch-size``); only used with DBO."""
    lora: bool = False
    """LoRA adapters are on (``--enable-lora``)."""
    speculative_method: str | None = None
    """vLLM's speculative method, as its ``SpeculativeConfig`` normalises it
    (``--speculative-config``); None without speculative decoding."""
    runner_type: str = "generate"
    """vLLM's resolved runner (``--runner``): generate, pooling or draft."""
    convert_type: str = "none"
    """vLLM's resolved model conversion (``--convert``): none, embed or
    classify."""

    @property
    def role_size(self) -> int:
        return self.dp * self.tp * self.pp


def _e(errors: list[FieldError], path: str, message: str) -> None:
    errors.append(FieldError(path, message))


def _absent(errors: list[FieldError], path: str, message: str) -> None:
    errors.append(FieldError(path, message, not_in_build=True))


def _check_deployment_shape(dep: Deployment, errors: list[FieldError]) -> None:
    for f in ("dp", "tp", "pp", "pcp", "dcp", "num_ubatches"):
        value = getattr(dep, f)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            _e(errors, f"{DEP}.{f}", f"must be an integer >= 1, got {value!r}")
    if dep.platform not in ("cpu", "cuda", "npu"):
        _e(
            errors,
            f"{DEP}.platform",
            f"must be one of cpu, cuda, npu; got {dep.platform!r}",
        )
    if dep.model_runner not in ("v1", "v2"):
        _e(errors, f"{DEP}.model_runner", f"must be v1 or v2, got {dep.model_runner!r}")
    if dep.graph_mode not in GRAPH_MODES:
        _e(
            errors,
            f"{DEP}.graph_mode",
            f"must be one of {', '.join(GRAPH_MODES)}; got {dep.graph_mode!r}",
        )


def _check_connector(cfg: AFDConfig, dep: Deployment, errors: list[FieldError]) -> bool:
    spec = AFDConnectorFactory.get_spec(cfg.connector)
    extra = cfg.extra
    ops = getattr(extra, "ops", None)
    ops_path = f"{AFD}.connector_extra_config.ops"
    if ops == "reference" and dep.platform != "cpu":
        _e(
            errors,
            ops_path,
            f"'reference' (the CPU kernels of the CAM ops) runs on the CPU "
            f"platform only, not {dep.platform}; use 'ascend'",
        )
    on_reference_ops = ops == "reference" and dep.platform == "cpu"
    if spec.platform != dep.platform and not on_reference_ops:
        if ops is not None and dep.platform == "cpu":
            _e(
                errors,
                ops_path,
                f"{cfg.connector} runs on the CPU platform with the reference "
                f"ops only (the CPU kernels of its operator contract): set "
                f"'reference', got {ops!r}",
            )
        else:
            others = [
                s.name
                for s in AFDConnectorFactory.specs()
                if s.platform == dep.platform
            ]
            _e(
                errors,
                f"{AFD}.connector",
                f"{cfg.connector} runs on {spec.platform}, not {dep.platform}; "
                f"use one of: {', '.join(others)}",
            )
    if not spec.implemented:
        built = [s.name for s in AFDConnectorFactory.specs() if s.implemented]
        _absent(
            errors,
            f"{AFD}.connector",
            f"{cfg.connector} is not in this build (registered, implementation "
            f"{spec.loader} absent); connectors in this build: {', '.join(built)}",
        )
    refusal = extra.graph_refusal() if dep.graph_mode != "eager" else None
    if refusal is not None:
        field, why = refusal
        _e(
            errors,
            f"{AFD}.connector_extra_config.{field}",
            f"{why}; graph mode {dep.graph_mode!r} is refused (run eager)",
        )
    gate = cfg.compute_gate_on_attention
    gate_path = f"{AFD}.compute_gate_on_attention"
    if cfg.connector == "CAMP2pAFDConnector":
        if gate:
            _e(errors, gate_path, "must be false for CAMP2pAFDConnector")
        if extra.compute_gate_on_attention:
            _e(
                errors,
                f"{AFD}.connector_extra_config.compute_gate_on_attention",
                "must be false for CAMP2pAFDConnector (CAM P2P operator contract)",
            )
    if cfg.connector == "CAMAsyncAFDConnector":
        if not gate:
            why = " (async_moe_ubatching is on)" if extra.async_moe_ubatching else ""
            _e(errors, gate_path, f"must be true for CAMAsyncAFDConnector{why}")
        if cfg.is_attention and extra.attn_ranks_per_dp != dep.tp:
            _e(
                errors,
                f"{AFD}.connector_extra_config.attn_ranks_per_dp",
                f"must equal the attention role's TP size ({dep.tp}), got "
                f"{extra.attn_ranks_per_dp}",
            )
    return spec.has_control_plane


def _check_model(cfg: AFDConfig, dep: Deployment, errors: list[FieldError]) -> None:
    family = family_of(dep.architecture)
    if family is None:
        _e(
            errors,
            f"{DEP}.architecture",
            f"{dep.architecture!r} has no AFD model wrapper; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}",
        )
        return
    if dep.platform not in family.platforms:
        _e(
            errors,
            f"{DEP}.platform",
            f"{family.family} is supported on {', '.join(family.platforms)}, "
            f"not {dep.platform}",
        )
    elif not family.in_build(dep.architecture):
        _absent(
            errors,
            f"{DEP}.architecture",
            f"{dep.architecture!r} ({family.family}) is not in this build (no "
            f"role-split model for it); this build splits: "
            f"{', '.join(BUILT_ARCHITECTURES)}",
        )
    if cfg.compute_gate_on_attention and not family.gate_on_attention:
        _e(
            errors,
            f"{AFD}.compute_gate_on_attention",
            f"must be false for {family.family} ({dep.architecture})",
        )


def _check_ranks(cfg: AFDConfig, dep: Deployment, errors: list[FieldError]) -> None:
    field = "num_attention_ranks" if cfg.is_attention else "num_ffn_ranks"
    if cfg.role_ranks != dep.role_size and not cfg.standby:
        _e(
            errors,
            f"{AFD}.{field}",
            f"must equal this {cfg.role} role's DP x TP x PP = "
            f"{dep.dp} x {dep.tp} x {dep.pp} = {dep.role_size}, got {cfg.role_ranks}",
        )
    spec = AFDConnectorFactory.get_spec(cfg.connector)
    if cfg.num_attention_ranks < cfg.num_ffn_ranks and not spec.any_ratio:
        _e(
            errors,
            f"{AFD}.num_attention_ranks",
            f"must be >= num_ffn_ranks ({cfg.num_ffn_ranks}), "
            f"got {cfg.num_attention_ranks}",
        )


def _check_standby(cfg: AFDConfig, dep: Deployment, errors: list[FieldError]) -> None:
    """Standby FFN servers: a connector that can promote them, and a standby
    that is one FFN rank."""
    if cfg.num_ffn_standby:
        refusal = AFDConnectorFactory.get_spec(cfg.connector).standby_refusal
        if refusal:
            supported = [
                s.name for s in AFDConnectorFactory.specs() if not s.standby_refusal
            ]
            _e(
                errors,
                f"{AFD}.num_ffn_standby",
                f"{cfg.connector} cannot promote standby FFN servers ({refusal}); "
                f"set 0, or use {', '.join(supported)}",
            )
    if cfg.standby and dep.role_size != 1:
        _e(
            errors,
            f"{AFD}.standby",
            f"a standby FFN server is one FFN rank (DP 1, TP 1, PP 1), got DP x "
            f"TP x PP = {dep.dp} x {dep.tp} x {dep.pp}",
        )


def _check_v2(cfg: AFDConfig, dep: Deployment, errors: list[FieldError]) -> None:
    """AFD-I8: the same constraints for both roles of a V2 pairing."""
    if dep.platform == "cpu":
        _e(errors, f"{DEP}.model_runner", "v2 needs Triton and is not available on cpu")
    if cfg.compute_gate_on_attention:
        _e(
            errors,
            f"{AFD}.compute_gate_on_attention",
            "must be false with model runner v2",
        )
    for f in ("pp", "pcp", "dcp"):
        if getattr(dep, f) != 1:
            _e(
                errors,
                f"{DEP}.{f}",
                f"must be 1 with model runner v2, got {getattr(dep, f)}",
            )
    if dep.enable_eplb:
        _e(errors, f"{DEP}.enable_eplb", "model runner v2 needs static EP (no EPLB)")
    if dep.enable_dbo:
        if dep.platform == "npu":
            _e(
                errors,
                f"{DEP}.enable_dbo",
                "DBO is not supported on NPU model runner v2",
            )
        elif cfg.is_attention and dep.dp < 2:
            _e(
                errors,
                f"{DEP}.dp",
                f"DBO on model runner v2 needs attention DP > 1, got {dep.dp}",
            )


def _check_dbo(
    has_cp: bool, cfg: AFDConfig, dep: Deployment, errors: list[FieldError]
) -> None:
    if dep.enable_dbo:
        if dep.num_ubatches != 2:
            _e(
                errors,
                f"{DEP}.num_ubatches",
                f"DBO runs exactly 2 micro-batches, got {dep.num_ubatches}",
            )
        if dep.platform == "cpu":
            _e(
                errors,
                f"{DEP}.enable_dbo",
                "vLLM's CPU platform turns --enable-dbo off; two micro-batches "
                f"on cpu are {AFD}.micro_batches: 2",
            )
        if not has_cp:
            _e(
                errors,
                f"{DEP}.enable_dbo",
                f"native DBO is not supported by {cfg.connector} (no control "
                "plane); use its async_moe_ubatching instead",
            )
    if cfg.micro_batches == 1:
        return
    path = f"{AFD}.micro_batches"
    if dep.platform != "cpu":
        _e(
            errors,
            path,
            f"is the CPU switch; two micro-batches on {dep.platform} are vLLM's "
            "--enable-dbo",
        )
    if not has_cp:
        _e(
            errors,
            path,
            f"{cfg.connector} has no control plane to announce the micro-batches",
        )


def _refuse(
    errors: list[FieldError],
    field: str,
    flag: str,
    feature: ServingFeature,
    tail: str = "",
) -> None:
    message = f"{flag} is refused under AFD: {feature.reason}{tail}"
    _e(errors, f"{DEP}.{field}", message)


def _check_serving_features(dep: Deployment, errors: list[FieldError]) -> None:
    """The serving features the table marks refused, each naming its flag."""
    if dep.lora:
        _refuse(errors, "lora", "--enable-lora", LORA)
    method = dep.speculative_method
    if method is not None and method not in SPECULATIVE_METHODS_ALLOWED:
        allowed = ", ".join(repr(m) for m in SPECULATIVE_METHODS_ALLOWED)
        flag = f"--speculative-config method {method!r}"
        tail = f"; allowed methods: {allowed}"
        _refuse(errors, "speculative_method", flag, DRAFT_SPECULATION, tail)
    convert = f"--convert {dep.convert_type}"
    if dep.runner_type == "pooling":
        also = f" ({convert})" if dep.convert_type != "none" else ""
        _refuse(errors, "runner_type", f"--runner pooling{also}", POOLING)
    elif dep.convert_type != "none":
        _refuse(errors, "convert_type", convert, POOLING)


def _check_worker(cfg: AFDConfig, dep: Deployment, errors: list[FieldError]) -> None:
    path = AUTO_WORKERS[(dep.platform, cfg.role)]
    if not worker_in_build(path):
        _absent(errors, f"{DEP}.platform", worker_not_in_build(path))


def runner_not_in_build(
    platform: str, model_runner: str, graph_mode: str
) -> list[tuple[str, str]]:
    """(field, why) for each part of a platform's role runners this build
    lacks, inside what the rules allow: the Ascend runners are model runner
    V1 and eager (their ACL graph capture and the V2 attention runner are not
    built yet). Empty when the build runs it."""
    if platform != "npu":
        return []
    out = []
    if model_runner == "v2":
        why = (
            "the AFD model runner V2 pair on Ascend is not in this build (no V2 "
            "attention runner; both roles run one runner version): run model "
            "runner V1"
        )
        out.append(("model_runner", why))
    if graph_mode != "eager":
        why = (
            f"ACL graph capture in the Ascend role runners is not in this build; "
            f"graph mode {graph_mode!r} needs it (run eager)"
        )
        out.append(("graph_mode", why))
    return out


def _check_runner_in_build(dep: Deployment, errors: list[FieldError]) -> None:
    for field, why in runner_not_in_build(
        dep.platform, dep.model_runner, dep.graph_mode
    ):
        _absent(errors, f"{DEP}.{field}", why)
    if dep.platform == "cuda" and dep.model_runner == "v2" and dep.enable_dbo:
        # the rules allow it (attention DP > 1); the V2 runners here do not
        # micro-batch, so refuse before any weight loads, not in the runner
        _absent(
            errors,
            f"{DEP}.enable_dbo",
            "micro-batching (DBO) in the AFD model runner V2 pair is not in this "
            "build: drop --enable-dbo or run model runner V1",
        )


def check_deployment(cfg: AFDConfig, dep: Deployment) -> list[FieldError]:
    """Every problem of this (config, deployment) pair; empty when valid.
    Problems with ``not_in_build`` set are what this build lacks."""
    errors: list[FieldError] = []
    _check_deployment_shape(dep, errors)
    if errors:
        return errors
    _check_worker(cfg, dep, errors)
    _check_runner_in_build(dep, errors)
    has_cp = _check_connector(cfg, dep, errors)
    _check_model(cfg, dep, errors)
    _check_ranks(cfg, dep, errors)
    _check_standby(cfg, dep, errors)
    if dep.model_runner == "v2":
        _check_v2(cfg, dep, errors)
    _check_dbo(has_cp, cfg, dep, errors)
    _check_serving_features(dep, errors)
    message = validate_cuda_graph_mode(
        dep.graph_mode, dep.platform, dep.model_runner, has_cp
    )
    if message:
        _e(errors, f"{DEP}.graph_mode", message)
    return errors


def validate_deployment(cfg: AFDConfig, dep: Deployment) -> None:
    """Raise ``AFDConfigError`` listing every problem; return when valid."""
    errors = check_deployment(cfg, dep)
    if errors:
        raise AFDConfigError(errors)
