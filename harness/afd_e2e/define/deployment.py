# SPDX-License-Identifier: Apache-2.0
"""A scenario seen through the plugin's eyes: per-role AFD config and Deployment.

The launcher builds ``--additional-config`` from here and the linter validates
it with the same ``validate_deployment`` the servers run.
"""

from __future__ import annotations

import json
from typing import Any

from afd_e2e.define.scenario import RoleTopology, Scenario
from afd_plugin.config import AFDConfig, parse_afd_config
from afd_plugin.errors import AFDConfigError, FieldError
from afd_plugin.validation import Deployment

ROLES = ("attention", "ffn")
STANDBY = "standby"
"""A standby FFN server's plan role: the FFN role's args and environment,
one rank, ``afd.role: ffn`` with ``standby: true``."""

# The vLLM flags each serving-feature field of Deployment is read from.
FEATURE_FLAGS: dict[str, tuple[str, ...]] = {
    "lora": ("--enable-lora", "--no-enable-lora"),
    "speculative_method": (
        "--speculative-config",
        "-sc",
        "--spec-method",
        "--spec-model",
    ),
    "runner_type": ("--runner", "--convert"),
    "convert_type": ("--convert",),
}


def role_topology(scenario: Scenario, role: str) -> RoleTopology:
    if role == "attention":
        return scenario.topology.attention
    assert scenario.topology.ffn is not None
    if role == STANDBY:  # one FFN rank
        return RoleTopology(dp=1, tp=1)
    return scenario.topology.ffn


def args_role(role: str) -> str:
    """The ``roles:`` entry whose args and env a plan role gets (a standby
    is an FFN server)."""
    return "ffn" if role == STANDBY else role


def cpu_micro_batches(scenario: Scenario) -> int:
    """``afd.micro_batches``: the scenario's micro-batches on the CPU, where
    vLLM has no DBO; 1 elsewhere (there the role args carry --enable-dbo)."""
    if scenario.backend == "cpu" and scenario.dbo.enabled:
        return scenario.dbo.ubatches
    return 1


def additional_config(
    scenario: Scenario, role: str, host: str, port: int
) -> dict[str, Any]:
    """The ``--additional-config`` value of one role (AFD scenarios only):
    ``attention``, ``ffn`` or ``standby``. With standbys every server is told
    their number; without, the dict is what it always was."""
    assert scenario.afd and scenario.connector is not None and scenario.topology.ffn
    afd: dict[str, Any] = {
        "role": args_role(role),
        "connector": scenario.connector.name,
        "host": host,
        "port": port,
        "num_attention_ranks": scenario.topology.attention.ranks,
        "num_ffn_ranks": scenario.topology.ffn.ranks,
        "compute_gate_on_attention": scenario.compute_gate_on_attention,
        "micro_batches": cpu_micro_batches(scenario),
        "connector_extra_config": dict(scenario.connector.extra),
    }
    if scenario.standbys:
        afd["num_ffn_standby"] = scenario.standbys
        if role == STANDBY:
            afd["standby"] = True
    return {"afd": afd}


def afd_config(scenario: Scenario, role: str) -> AFDConfig:
    """Parse exactly what the server will parse (raises AFDConfigError)."""
    config = parse_afd_config(additional_config(scenario, role, "127.0.0.1", 29650))
    assert config is not None
    return config


def role_args(scenario: Scenario, role: str) -> list[str]:
    """The vLLM args the scenario adds to one role: common ones, then its own
    (argparse keeps the last of a repeated flag)."""
    own = getattr(scenario.roles, args_role(role)).args
    return [*scenario.roles.common.args, *own]


def _flag_at(args: list[str], flags: tuple[str, ...]) -> int | None:
    """Index of the last of ``flags`` in ``args`` (``--f v`` or ``--f=v``)."""
    found = [i for i, a in enumerate(args) if a.partition("=")[0] in flags]
    return found[-1] if found else None


def _flag(args: list[str], *flags: str) -> str | None:
    """The value of the last of ``flags`` (spellings of one flag) in
    ``args``; None when it is absent."""
    at = _flag_at(args, flags)
    if at is None:
        return None
    _, eq, inline = args[at].partition("=")
    if eq:
        return inline
    return args[at + 1] if at + 1 < len(args) else ""


def flag_location(scenario: Scenario, role: str, field: str) -> tuple[Any, ...]:
    """Where the scenario sets the serving-feature ``field`` of one role's
    Deployment: the args item that decides it."""
    for part in (args_role(role), "common"):
        at = _flag_at(getattr(scenario.roles, part).args, FEATURE_FLAGS[field])
        if at is not None:
            return ("roles", part, "args", at)
    return ("roles",)


def speculative_method(args: list[str]) -> str | None:
    """The speculative method vLLM 0.32.0 resolves from the args, as its
    ``SpeculativeConfig.__post_init__`` normalises it (no method: ``ngram``
    for an ``ngram`` model, ``custom_class`` for a dotted import path,
    ``draft_model`` otherwise; ``[ngram]`` is ``ngram``; the ``*_mtp``
    methods are ``mtp``). None without speculative decoding."""
    spec: dict[str, Any] = {}
    text = _flag(args, "--speculative-config", "-sc")
    if text is not None:
        try:
            spec = {k.replace("-", "_"): v for k, v in json.loads(text).items()}
        except (ValueError, AttributeError) as exc:
            raise AFDConfigError(
                [
                    FieldError(
                        "deployment.speculative_method",
                        f"--speculative-config must be a JSON object, got "
                        f"{text!r} ({exc})",
                    )
                ]
            ) from None
    for flag, key in (("--spec-method", "method"), ("--spec-model", "model")):
        value = _flag(args, flag)
        if value is not None:
            spec[key] = value
    if not spec:
        return None
    method, model = spec.get("method"), spec.get("model")
    if method is None:
        if model in ("ngram", "[ngram]"):
            return "ngram"
        parts = str(model).split(".")
        dotted = "/" not in str(model) and len(parts) >= 2
        if dotted and all(p.isidentifier() for p in parts):
            return "custom_class"
        return "draft_model"
    method = str(method)
    if method == "[ngram]":
        return "ngram"
    return "mtp" if method.endswith("_mtp") else method


def runner_and_convert(args: list[str]) -> tuple[str, str]:
    """vLLM's runner and convert types from ``--runner`` and ``--convert``,
    for a generative architecture (``auto`` resolves to ``generate``; a
    ``--convert`` other than ``auto``/``none`` selects ``pooling``)."""
    runner = _flag(args, "--runner") or "auto"
    convert = _flag(args, "--convert") or "auto"
    convert_type = "none" if convert == "auto" else convert
    if runner != "auto":
        return runner, convert_type
    return ("generate" if convert_type == "none" else "pooling"), convert_type


def deployment(scenario: Scenario, role: str) -> Deployment:
    """The validator's view of one role server of the scenario, as the server
    will fill it from vLLM's config."""
    topo = role_topology(scenario, role)
    args = role_args(scenario, role)
    lora_at = _flag_at(args, FEATURE_FLAGS["lora"])
    runner_type, convert_type = runner_and_convert(args)
    return Deployment(
        platform=scenario.backend,
        architecture=scenario.model.resolved_architecture,
        model_runner=scenario.model_runner,
        graph_mode=scenario.graph.mode,
        dp=topo.dp,
        tp=topo.tp,
        enable_expert_parallel=topo.ep,
        enable_dbo=scenario.dbo.enabled and scenario.backend != "cpu",
        num_ubatches=scenario.dbo.ubatches,
        lora=lora_at is not None and args[lora_at] == "--enable-lora",
        speculative_method=speculative_method(args),
        runner_type=runner_type,
        convert_type=convert_type,
    )
