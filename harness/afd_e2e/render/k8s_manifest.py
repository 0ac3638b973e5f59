# SPDX-License-Identifier: Apache-2.0
"""The rendered Kubernetes document: the objects, in their order, as
multi-document YAML under a comment header that names the scenario and what
the cluster must hold before it is applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from afd_e2e.define.scenario import Scenario
from afd_e2e.launch.plan import LaunchPlan
from afd_e2e.render.k8s_pod import (
    DEVICE_RESOURCE,
    NODE_LABEL,
    ONE_NODE,
    SECRET_KEY,
    PodSettings,
    accelerators,
)

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_RELEASE = "v0.10.0"
"""The LeaderWorkerSet release whose v1 schema the output is checked against
(``tests/data/lws-v1-leaderworkerset.schema.json``)."""


@dataclass
class Manifest:
    """The rendered objects and the header that says what must exist first."""

    scenario_id: str
    header: list[str]
    objects: list[dict[str, Any]] = field(default_factory=list)

    def to_yaml(self) -> str:
        """Multi-document YAML: the header as comments, then one document per
        object, in a fixed order."""
        head = "".join(f"# {line}".rstrip() + "\n" for line in self.header)
        docs = [
            yaml.safe_dump(obj, sort_keys=False, width=100, default_flow_style=False)
            for obj in self.objects
        ]
        return head + "".join("---\n" + doc for doc in docs)


def header(
    scenario_id: str,
    scenario: Scenario,
    plan: LaunchPlan,
    settings: PodSettings,
    secret: bool,
) -> list[str]:
    """The comment block on top: the scenario, and what must exist first."""
    kind = "AFD" if scenario.afd else "Colocated"
    out = [
        f"{kind} scenario {scenario_id}: {scenario.description}",
        f"Rendered by `afd-e2e render {scenario_id} --engine k8s` from its plan.",
        "Apply: kubectl apply --server-side -n NAMESPACE -f FILE",
        "What must exist on the cluster first:",
        f"- the LeaderWorkerSet controller {LWS_RELEASE} (CRD {LWS_API_VERSION})",
    ]
    if secret:
        name = settings.secret_name
        command = (
            f"kubectl create secret generic {name} -n NAMESPACE "
            f'--from-literal={SECRET_KEY}="$(openssl rand -hex 32)"'
        )
        out += [
            f"- Secret {name} (key {SECRET_KEY}): the rendezvous secret, >= 16 bytes,",
            "  never rendered here; for example:",
            f"    {command}",
        ]
    out.append(f"- Kubernetes nodes labelled {NODE_LABEL}=<logical node>:")
    resource = DEVICE_RESOURCE.get(settings.backend)
    servers: dict[str, list[str]] = {}
    for launch in plan.roles:
        devices = accelerators(launch, settings.backend)
        held = f" ({devices} x {resource})" if resource and devices else ""
        servers.setdefault(launch.node or ONE_NODE, []).append(launch.name + held)
    out += [f"    {node}: {', '.join(names)}" for node, names in servers.items()]
    pvc = settings.models_pvc
    out += [
        f"- PersistentVolumeClaim {pvc} holding {plan.model_path}",
        f"- image {settings.image} with vLLM and afd-plugin installed",
        "- pods allowed on the host network (hostNetwork), their ports free there",
    ]
    return out
