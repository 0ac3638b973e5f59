# SPDX-License-Identifier: Apache-2.0
"""Scenario rules: the plugin's validator for each role plus the harness gates
of AFD-I12 (PR size and shape, DBO floors, the marker-scan allowlist)."""

from __future__ import annotations

from typing import Any

from afd_e2e.define import policy
from afd_e2e.define.deployment import (
    FEATURE_FLAGS,
    ROLES,
    STANDBY,
    afd_config,
    deployment,
    flag_location,
)
from afd_e2e.define.failover_rules import failover_check_errors, standby_errors
from afd_e2e.define.scenario import LoadedScenario, Scenario
from afd_e2e.define.yamlpos import Located
from afd_e2e.launch.placement import placement_errors
from afd_plugin.errors import AFDConfigError, FieldError
from afd_plugin.validation import check_deployment

# Plugin error paths -> the scenario field a user edits.
_PLUGIN_TO_SCENARIO = {
    "additional_config.afd.compute_gate_on_attention": ("compute_gate_on_attention",),
    "additional_config.afd.connector": ("connector", "name"),
    "additional_config.afd.num_attention_ranks": ("topology", "attention"),
    "additional_config.afd.num_ffn_ranks": ("topology", "ffn"),
    "additional_config.afd.num_ffn_standby": ("topology", "ffn", "standby"),
    "additional_config.afd.standby": ("topology", "ffn", "standby"),
    "deployment.graph_mode": ("graph", "mode"),
    "deployment.model_runner": ("model_runner",),
    "deployment.enable_dbo": ("dbo", "enabled"),
    "deployment.num_ubatches": ("dbo", "ubatches"),
    "additional_config.afd.micro_batches": ("dbo", "ubatches"),
    "deployment.architecture": ("model",),
    "deployment.platform": ("backend",),
}


def _scenario_path(plugin_path: str, s: Scenario, role: str) -> tuple[Any, ...]:
    if plugin_path in _PLUGIN_TO_SCENARIO:
        return _PLUGIN_TO_SCENARIO[plugin_path]
    field = plugin_path.removeprefix("deployment.")
    if field in FEATURE_FLAGS:
        return flag_location(s, role, field)
    if plugin_path.startswith("additional_config.afd.connector_extra_config"):
        rest = plugin_path.split("connector_extra_config", 1)[1].lstrip(".")
        return ("connector", "extra", *([rest] if rest else []))
    if plugin_path.startswith("deployment."):
        return ("topology", role, plugin_path.split(".", 1)[1])
    return ()


def _plugin_problems(s: Scenario) -> list[tuple[str, FieldError]]:
    """(role, problem) from the plugin's one validator, both roles (and a
    standby's, where there are standbys), exactly as the servers will ask it."""
    if not s.afd:
        return []
    out = []
    for role in (*ROLES, STANDBY) if s.standbys else ROLES:
        try:
            problems = check_deployment(afd_config(s, role), deployment(s, role))
        except AFDConfigError as exc:
            problems = list(exc.errors)
        out += [(role, p) for p in problems]
    return out


def build_gaps(s: Scenario) -> list[str]:
    """What this build lacks to run ``s`` (the plugin's "not in this build"
    answers), one line each, without repeats."""
    seen: dict[str, None] = {}
    for _, problem in _plugin_problems(s):
        if problem.not_in_build:
            seen.setdefault(str(problem), None)
    return list(seen)


def plugin_errors(loaded: LoadedScenario, s: Scenario) -> list[Located]:
    """The plugin validator's answers as located scenario errors. A scenario
    that ``awaits`` an implementation may lack one; it may not lack nothing."""
    out: list[Located] = []
    seen: set[str] = set()
    problems = _plugin_problems(s)
    if s.awaits is not None and not any(p.not_in_build for _, p in problems):
        out.append(
            loaded.error(
                ("awaits",),
                "this build holds everything the scenario needs; remove awaits "
                f"({s.awaits!r}) so that it runs",
            )
        )
    for role, problem in problems:
        if problem.not_in_build and s.awaits is not None:
            continue
        text = f"{problem.path}: {problem.message}"
        if text in seen:
            continue
        seen.add(text)
        message = f"[{role} role] {problem.message} (plugin: {problem.path})"
        if problem.not_in_build:
            message += "; set awaits: <what is missing> until it lands"
        out.append(loaded.error(_scenario_path(problem.path, s, role), message))
    return out


def _structure(loaded: LoadedScenario, s: Scenario) -> list[Located]:
    out = []
    if s.afd and s.connector is None:
        out.append(loaded.error(("connector",), "an AFD scenario needs a connector"))
    if s.afd and s.topology.ffn is None:
        out.append(loaded.error(("topology",), "an AFD scenario needs topology.ffn"))
    if not s.afd:
        for name in ("connector", "topology.ffn"):
            value = s.connector if name == "connector" else s.topology.ffn
            if value is not None:
                out.append(
                    loaded.error(
                        tuple(name.split(".")),
                        "a colocated scenario (afd: false) has no " + name,
                    )
                )
    model = s.model
    if (model.tiny is None) == (model.hub_id is None):
        out.append(
            loaded.error(("model",), "set exactly one of model.tiny, model.hub_id")
        )
    if model.hub_id is not None and not model.architecture:
        out.append(loaded.error(("model",), "a hub model needs model.architecture"))
    if model.tiny is not None and s.backend != "cpu":
        out.append(loaded.error(("model", "tiny"), "tiny models are for cpu scenarios"))
    for role in ("attention", "ffn"):
        topo = s.topology.attention if role == "attention" else s.topology.ffn
        if topo is None:
            continue
        if s.backend == "cpu" and topo.devices:
            out.append(
                loaded.error(
                    ("topology", role, "devices"),
                    "cpu scenarios use no devices; remove the list",
                )
            )
        if (
            s.backend != "cpu"
            and s.placement is None
            and len(topo.devices) != topo.ranks
        ):
            out.append(
                loaded.error(
                    ("topology", role, "devices"),
                    f"needs one device per rank: dp x tp = {topo.ranks}, "
                    f"got {len(topo.devices)}",
                )
            )
    all_devices = list(s.topology.attention.devices)
    if s.topology.ffn is not None:
        all_devices += s.topology.ffn.devices
    if len(set(all_devices)) != len(all_devices):
        out.append(
            loaded.error(("topology",), f"a device is used twice: {all_devices}")
        )
    return out


def _gates(loaded: LoadedScenario, s: Scenario) -> list[Located]:
    out = []
    if s.tier == "pr":
        if s.devices > policy.PR_MAX_DEVICES:
            out.append(
                loaded.error(
                    ("tier",),
                    f"a pr scenario uses at most {policy.PR_MAX_DEVICES} devices, this "
                    f"one uses {s.devices}; make it weekly or shrink the topology",
                )
            )
        if s.afd and s.topology.ffn is not None:
            shape = (s.topology.attention.ranks, s.topology.ffn.ranks)
            if shape == (2, 1):
                out.append(
                    loaded.error(
                        ("tier",), "2A1F scenarios are never pr; use weekly or local"
                    )
                )
            elif shape != policy.PR_AFD_TOPOLOGY:
                out.append(
                    loaded.error(
                        ("tier",),
                        f"an AFD pr scenario must be 2A2F, this one is {s.shape}",
                    )
                )
    if (
        s.backend != "cpu"
        and s.placement is not None
        and len(s.nodes) > 1
        and s.tier not in ("nightly", "local")
    ):
        out.append(
            loaded.error(
                ("tier",),
                f"a {s.backend} scenario on {len(s.nodes)} nodes is nightly (or "
                f"local): multi-node hardware runs in ci/nightly.yml, not {s.tier}",
            )
        )
    if s.dbo.enabled:
        g = s.checks.gsm8k
        if g is None:
            out.append(loaded.error(("checks",), "a DBO scenario needs checks.gsm8k"))
        else:
            if g.concurrency < policy.DBO_MIN_CONCURRENCY:
                out.append(
                    loaded.error(
                        ("checks", "gsm8k", "concurrency"),
                        "a DBO scenario needs concurrency >= "
                        f"{policy.DBO_MIN_CONCURRENCY}, got {g.concurrency}",
                    )
                )
            if g.samples < policy.DBO_MIN_SAMPLES:
                out.append(
                    loaded.error(
                        ("checks", "gsm8k", "samples"),
                        f"a DBO scenario needs >= {policy.DBO_MIN_SAMPLES} samples, "
                        f"got {g.samples}",
                    )
                )
        if not s.checks.dual_ubatch_evidence:
            out.append(
                loaded.error(
                    ("checks",),
                    "a DBO scenario must set checks.dual_ubatch_evidence: true",
                )
            )
    if (
        s.teardown.sigkill == "marker-scan"
        and loaded.id not in policy.MARKER_SCAN_SCENARIOS
    ):
        allowed = ", ".join(sorted(policy.MARKER_SCAN_SCENARIOS))
        out.append(
            loaded.error(
                ("teardown", "sigkill"),
                f"the marker-scan exception is only for the NPU async-CAM scenarios "
                f"({allowed}); use 'fail'",
            )
        )
    return out


def check_scenario(loaded: LoadedScenario) -> list[Located]:
    """Every rule violation of one loaded scenario (schema errors come first)."""
    s = loaded.scenario
    if s is None:
        return list(loaded.errors)
    out = list(loaded.errors)
    if loaded.source.backend_dir != s.backend:
        out.append(
            loaded.error(
                ("backend",),
                f"file is under scenarios/{loaded.source.backend_dir}/ but "
                f"backend is {s.backend!r}; move it or fix backend",
            )
        )
    structure = _structure(loaded, s) + placement_errors(loaded, s)
    structure += standby_errors(loaded, s)
    out += structure
    if not structure:
        out += plugin_errors(loaded, s)
    out += _gates(loaded, s) + failover_check_errors(loaded, s)
    return out
