# SPDX-License-Identifier: Apache-2.0
"""A scenario as Kubernetes objects (``afd-e2e render ID --engine k8s``), built
from the same launch plan ``afd-e2e run`` starts: one LeaderWorkerSet per role,
a headless Service per node the plan addresses, the API Service.

Shape. Each role (``attention``, ``ffn``; ``baseline`` for a colocated
scenario) is one LeaderWorkerSet of ``replicas: 1`` whose ``size`` is the
role's server count: the leader pod runs the role's first server (its API and,
for FFN, the AFD rendezvous; for attention when there are standbys), the
worker pods its ``--headless`` servers. Each standby FFN server is an LWS of
size 1 of its own (``<name>-standby-<i>``), on its placement node: it runs
one rank and serves its own API, so it is no worker of the FFN role's. A
role with one server is an LWS of size 1 too (LWS then runs the leader from
the worker template), so every role reads alike. ``startupPolicy:
LeaderCreated``: a spanning role's leader is ready only once its workers have
joined, so waiting for it would deadlock. ``restartPolicy:
RecreateGroupOnPodRestart``: a DP group that lost a rank cannot go on. The
headless servers of a role share the worker template, so they may differ only
in their start rank (same ``dp_local``, device count and node environment),
which a shell then computes from ``LWS_WORKER_INDEX``; spread over several
nodes, one per node (node affinity to those nodes, anti-affinity between the
workers).

Addresses. Pods use their node's network (``hostNetwork``): a logical node
then has one address that every server on it shares, which is what the plan
is built on, and a node's ``interface`` names one of that node's own NICs (for
the gloo/NCCL/HCCL bootstrap), as on bare metal. ``build_plan`` gets, as the
address of each logical node, the in-cluster DNS name of a headless Service,
``<name>-node-<node>``, that selects this deployment's pods on that node
(``publishNotReadyAddresses``: it resolves before they are ready). No argv
holds a literal IP, and every such name an argv holds has its Service:

- the AFD ``host`` in every role's ``--additional-config`` is the first FFN
  server's node (the first attention server's with standbys); that server's
  first rank listens there, on its node's IP;
- ``--data-parallel-address`` of a role spanning servers is its leader's node;
- the API ``--host`` is ``$(POD_IP)`` (downward API ``status.podIP``, the node's
  IP on the host network): one address, not ``0.0.0.0`` (on the host network,
  every NIC of the node), and not a name the cluster DNS must know before the
  pod is up. The API Service and the readiness probe reach it there.

A scenario without a placement runs on one node (``ONE_NODE``): its plan keeps
its loopback rendezvous (its pods share the node's loopback) and needs no
Service but the API's, and no Secret. Device ids are the device plugin's
choice: a pod requests as many accelerators as the plan gives its server and
sees only those, so the plan's visible-devices list is not rendered. The
rendezvous secret is a reference to a Secret the user creates; no value is
ever rendered. The image runs the plan's argv with its ``python3``. Output is
deterministic: fixed ports (the plan picks free ones at run time) and a run id
named after the deployment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from afd_e2e.define.scenario import Ports, Scenario
from afd_e2e.launch.placement import rendezvous_role
from afd_e2e.launch.plan import SECRET_ENV, LaunchPlan, RoleLaunch, build_plan
from afd_e2e.render.k8s_manifest import (
    LWS_API_VERSION,
    Manifest,
    header,
)
from afd_e2e.render.k8s_pod import (
    NODE_LABEL,
    ONE_NODE,
    PORT_NAMES,
    SERVER_LABEL,
    PodSettings,
    ServerPorts,
    accelerators,
    flag_value,
    pod_template,
    server_argv,
    server_env,
    worker_command,
)
from afd_plugin.config import AFDConfig

API_PORT = 8000
"""First API port (a scenario's ``ports.api`` wins), and the API Service's."""
DP_RPC_PORT = {"attention": 29551, "ffn": 29552, "baseline": 29553}
"""``--data-parallel-rpc-port`` per role: distinct, since pods on one node
share its ports."""
NAME_MAX = {"lws": 50, "service": 63}
"""LWS names its workers' StatefulSet ``<lws>-0``, and a StatefulSet name
longer than 52 characters breaks its pods' revision label; Service names are
DNS labels."""
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class RenderError(ValueError):
    """The scenario cannot be rendered as asked; the message says why."""


@dataclass(frozen=True)
class K8sOptions:
    """What the cluster provides, as the rendered objects name it."""

    image: str | None = None
    """Container image with vLLM and afd-plugin (default ``afd-plugin:<backend>``)."""
    model_root: str = "/models"
    """Mount path of the models volume inside the pods."""
    models_pvc: str = "afd-models"
    """PersistentVolumeClaim with the weights (``<hub_id>`` or the tiny model)."""
    name: str | None = None
    """Name prefix of every object (default: ``default_name`` of the id)."""
    node_cpus: int = 8
    """CPUs of a node (a CPU scenario's per-rank thread share)."""


def default_name(scenario_id: str) -> str:
    """The id folded into a DNS label, prefixed ``afd-`` unless it already is."""
    folded = re.sub(r"[^a-z0-9]+", "-", scenario_id.lower()).strip("-")
    return folded if folded.startswith("afd-") else f"afd-{folded}"


def node_service(name: str, node: str) -> str:
    return f"{name}-node-{node}"


def _k8s_scenario(scenario: Scenario) -> Scenario:
    """The scenario as deployed: pinned ports, and no colocated reference (a
    harness check, not part of the deployment)."""
    ports = Ports(
        api=scenario.ports.api or API_PORT,
        afd=scenario.ports.afd or AFDConfig.model_fields["port"].default,
    )
    checks = scenario.checks.model_copy(update={"parity": None, "ffn_failover": None})
    return scenario.model_copy(update={"ports": ports, "checks": checks})


def plan_for_cluster(
    scenario_id: str, scenario: Scenario, name: str, options: K8sOptions
) -> LaunchPlan:
    """The launch plan with every logical node at its Service's DNS name."""
    nodes = {node: node_service(name, node) for node in scenario.nodes}
    return build_plan(
        scenario_id,
        _k8s_scenario(scenario),
        model_root=Path(options.model_root),
        run_dir=Path("runs") / name,
        run_id=name,
        python="python3",
        cpus=options.node_cpus,
        nodes=nodes,
    )


def _name_problems(name: str, scenario: Scenario, model_root: str) -> list[str]:
    """What is wrong with the names and paths the objects would carry."""
    out = []
    if not model_root.startswith("/"):
        out.append(
            "the model root is a mount path in the pods and must be absolute, "
            f"got {model_root!r}"
        )
    if not DNS_1035.match(name):
        out.append(
            f"name {name!r} must be a DNS-1035 label (lower-case letters, digits "
            "and '-', starting with a letter)"
        )
    roles = ["attention", "ffn"] if scenario.afd else ["baseline"]
    roles += [f"standby-{i}" for i in range(scenario.standbys)]
    wanted = [(f"{name}-{role}", NAME_MAX["lws"]) for role in roles]
    wanted += [(node_service(name, n), NAME_MAX["service"]) for n in scenario.nodes]
    wanted.append((f"{name}-api", NAME_MAX["service"]))
    out += [
        f"object name {obj!r} is longer than {limit} characters; choose a "
        "shorter prefix with --name"
        for obj, limit in wanted
        if len(obj) > limit
    ]
    return out


def _refusal(scenario_id: str, problems: list[str]) -> RenderError:
    if len(problems) == 1:
        return RenderError(f"{scenario_id}: {problems[0]}")
    listed = "".join(f"\n  - {p}" for p in problems)
    return RenderError(f"{scenario_id}: {len(problems)} problems:{listed}")


@dataclass(frozen=True)
class _Role:
    """One role's servers in the plan: the leader first."""

    name: str
    servers: list[RoleLaunch]

    @property
    def leader(self) -> RoleLaunch:
        return self.servers[0]

    @property
    def workers(self) -> list[RoleLaunch]:
        return self.servers[1:]


def _roles(plan: LaunchPlan) -> list[_Role]:
    """The plan's servers by role; each standby is a role of its own."""
    order: dict[str, list[RoleLaunch]] = {}
    for launch in plan.roles:
        key = launch.name if launch.role == "standby" else launch.role
        order.setdefault(key, []).append(launch)
    return [_Role(role, servers) for role, servers in order.items()]


def _start_rank(launch: RoleLaunch) -> int:
    value = flag_value(launch.argv, "--data-parallel-start-rank")
    assert value is not None, launch.name
    return int(value)


def _worker_command(role: _Role, argvs: list[list[str]]) -> list[str]:
    """The command of the role's worker template: the one headless server's
    argv, or for several the argv they share with the start rank computed
    from LWS_WORKER_INDEX (``_worker_problems`` says when they share none)."""
    if len(argvs) == 1:
        return argvs[0]
    starts = [_start_rank(w) for w in role.workers]
    return worker_command(argvs[0], starts[0], starts[1] - starts[0])


def _worker_problems(role: _Role, settings: PodSettings) -> list[str]:
    """Why one worker template cannot run all of the role's headless servers:
    they must differ only in their start rank, by the same step, and be one
    per node when on several nodes."""
    if len(role.workers) < 2:
        return []
    out = []
    rpc = DP_RPC_PORT.get(role.name)
    starts = [_start_rank(w) for w in role.workers]
    step = starts[1] - starts[0]
    looks = [
        (
            worker_command(server_argv(w, rpc), starts[0], step),
            server_env(w, settings),
            accelerators(w, settings.backend),
        )
        for w in role.workers
    ]
    progression = [starts[0] + i * step for i in range(len(starts))]
    if any(look != looks[0] for look in looks) or starts != progression:
        out.append(
            f"the headless {role.name} servers differ in more than their start "
            "rank (dp_local, devices or their node's interface); one "
            "LeaderWorkerSet worker template runs them all, so make them alike"
        )
    nodes = [w.node or ONE_NODE for w in role.workers]
    if len(set(nodes)) > 1 and len(set(nodes)) != len(nodes):
        out.append(
            f"the headless {role.name} servers span several nodes with more than "
            f"one on some ({', '.join(nodes)}); one worker template spreads them "
            "one per node, so place one per node (or all on one)"
        )
    return out


def _labels(name: str, role: str | None = None) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "afd-plugin", "app.kubernetes.io/instance": name}
    if role is not None:
        out["app.kubernetes.io/component"] = role
    return out


def _service(name: str, labels: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def _node_services(
    name: str, scenario: Scenario, plan: LaunchPlan, roles: list[_Role]
) -> list[dict[str, Any]]:
    """A headless Service for every node whose name an argv uses (the AFD host,
    a spanning role's DP address), listing what listens there."""
    by_name = {node_service(name, n): n for n in scenario.nodes}
    ports: dict[str, list[dict[str, Any]]] = {}
    if plan.afd_port is not None and plan.afd_host in by_name:
        ports.setdefault(by_name[plan.afd_host], []).append(
            {"name": PORT_NAMES["rendezvous"], "port": plan.afd_port}
        )
    for role in roles:
        address = flag_value(role.leader.argv, "--data-parallel-address")
        if address is not None:
            ports.setdefault(by_name[address], []).append(
                {"name": f"dp-{role.name}", "port": DP_RPC_PORT[role.name]}
            )
    return [
        _service(
            node_service(name, node),
            {**_labels(name), NODE_LABEL: node},
            {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"app.kubernetes.io/instance": name, NODE_LABEL: node},
                "ports": [{**p, "protocol": "TCP"} for p in listening],
            },
        )
        for node, listening in sorted(ports.items())
    ]


def _api_service(name: str, plan: LaunchPlan) -> dict[str, Any]:
    role = plan.api.role
    selector = {**_labels(name, role), SERVER_LABEL: "leader"}
    del selector["app.kubernetes.io/name"]
    return _service(
        f"{name}-api",
        _labels(name, role),
        {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": PORT_NAMES["api"],
                    "port": API_PORT,
                    "targetPort": PORT_NAMES["api"],
                    "protocol": "TCP",
                }
            ],
        },
    )


def _leader_ports(role: _Role, plan: LaunchPlan, host_role: str) -> ServerPorts:
    leader = role.leader
    return ServerPorts(
        api=None if leader.headless else leader.api_port,
        rendezvous=plan.afd_port if role.name == host_role else None,
        dp_rpc=(
            DP_RPC_PORT[role.name]
            if "--data-parallel-rpc-port" in leader.argv
            else None
        ),
    )


def _leader_worker_set(
    name: str, role: _Role, plan: LaunchPlan, settings: PodSettings, host_role: str
) -> dict[str, Any]:
    """``host_role``: the role whose leader hosts the AFD rendezvous."""
    rpc = DP_RPC_PORT.get(role.name)
    labels = _labels(name, role.name)
    leader = pod_template(
        role.leader,
        server_argv(role.leader, rpc),
        _leader_ports(role, plan, host_role),
        settings,
        nodes=[role.leader.node or ONE_NODE],
        labels={**labels, SERVER_LABEL: "leader"},
    )
    template: dict[str, Any] = {
        "size": len(role.servers),
        "restartPolicy": "RecreateGroupOnPodRestart",
    }
    if role.workers:
        command = _worker_command(role, [server_argv(w, rpc) for w in role.workers])
        template["leaderTemplate"] = leader
        template["workerTemplate"] = pod_template(
            role.workers[0],
            command,
            ServerPorts(),
            settings,
            nodes=sorted({w.node or ONE_NODE for w in role.workers}),
            labels={**labels, SERVER_LABEL: "worker"},
        )
    else:  # size 1: LWS runs the leader from the worker template
        template["workerTemplate"] = leader
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": f"{name}-{role.name}", "labels": labels},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": template,
        },
    }


def render_k8s(
    scenario_id: str, scenario: Scenario, options: K8sOptions | None = None
) -> Manifest:
    """The Kubernetes objects that run ``scenario``, built from its launch plan
    (the module docstring says how). Raises ``RenderError`` listing every
    problem (a name, a shape one worker template cannot run),
    ``AFDConfigError`` for an invalid AFD config."""
    options = options or K8sOptions()
    name = options.name or default_name(scenario_id)
    problems = _name_problems(name, scenario, options.model_root)
    if problems:
        raise _refusal(scenario_id, problems)
    plan = plan_for_cluster(scenario_id, scenario, name, options)
    settings = PodSettings(
        backend=scenario.backend,
        image=options.image or f"afd-plugin:{scenario.backend}",
        model_root=options.model_root,
        models_pvc=options.models_pvc,
        secret_name=f"{name}-rendezvous",
        grace_s=scenario.timeouts.teardown_grace_s,
    )
    roles = _roles(plan)
    problems = [p for role in roles for p in _worker_problems(role, settings)]
    if problems:
        raise _refusal(scenario_id, problems)
    objects = _node_services(name, scenario, plan, roles)
    objects.append(_api_service(name, plan))
    host_role = rendezvous_role(scenario)
    objects += [
        _leader_worker_set(name, role, plan, settings, host_role) for role in roles
    ]
    secret = any(SECRET_ENV in launch.env for launch in plan.roles)
    head = header(scenario_id, scenario, plan, settings, secret)
    return Manifest(scenario_id, head, objects)
