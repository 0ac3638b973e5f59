# SPDX-License-Identifier: Apache-2.0
"""A scenario seen through the plugin's eyes: per-role AFD config and Deployment.

The launcher builds ``--additional-config`` from here and the linter validates
it with the same ``validate_deployment`` the servers run.
"""

from __future__ import annotations

from typing import Any

from afd_e2e.scenario import RoleTopology, Scenario
from afd_plugin.config import AFDConfig, parse_afd_config
from afd_plugin.validation import Deployment

ROLES = ("attention", "ffn")


def role_topology(scenario: Scenario, role: str) -> RoleTopology:
    if role == "attention":
        return scenario.topology.attention
    assert scenario.topology.ffn is not None
    return scenario.topology.ffn


def cpu_micro_batches(scenario: Scenario) -> int:
    """``afd.micro_batches``: the scenario's micro-batches on the CPU, where
    vLLM has no DBO; 1 elsewhere (there the role args carry --enable-dbo)."""
    if scenario.backend == "cpu" and scenario.dbo.enabled:
        return scenario.dbo.ubatches
    return 1


def additional_config(
    scenario: Scenario, role: str, host: str, port: int
) -> dict[str, Any]:
    """The ``--additional-config`` value of one role (AFD scenarios only)."""
    assert scenario.afd and scenario.connector is not None and scenario.topology.ffn
    return {
        "afd": {
            "role": role,
            "connector": scenario.connector.name,
            "host": host,
            "port": port,
            "num_attention_ranks": scenario.topology.attention.ranks,
            "num_ffn_ranks": scenario.topology.ffn.ranks,
            "compute_gate_on_attention": scenario.compute_gate_on_attention,
            "micro_batches": cpu_micro_batches(scenario),
            "connector_extra_config": dict(scenario.connector.extra),
        }
    }


def afd_config(scenario: Scenario, role: str) -> AFDConfig:
    """Parse exactly what the server will parse (raises AFDConfigError)."""
    config = parse_afd_config(additional_config(scenario, role, "127.0.0.1", 29650))
    assert config is not None
    return config


def deployment(scenario: Scenario, role: str) -> Deployment:
    topo = role_topology(scenario, role)
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
    )
