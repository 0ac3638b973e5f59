# SPDX-License-Identifier: Apache-2.0
"""One server of a launch plan as a Kubernetes pod template: its command (the
plan's argv, with the pod's own listen address), environment, ports,
accelerator request, readiness probe, node selection and volumes.

Pure data; ``afd_e2e.render.k8s`` decides which servers share a template."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from afd_e2e.define import policy
from afd_e2e.launch.plan import DEVICE_ENV, SECRET_ENV, RoleLaunch

ONE_NODE = "node-0"
"""The logical node of a scenario without a placement."""
NODE_LABEL = "afd.vllm.ai/node"
"""Node label naming the logical node a Kubernetes node plays; the pods of a
server select it, and a pod pinned to one node carries it too."""
SERVER_LABEL = "afd.vllm.ai/server"
"""``leader`` (a role's first server) or ``worker`` (its headless servers)."""
DEVICE_RESOURCE = {"cuda": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"}
"""The extended resource of one accelerator, per backend (the device plugin's)."""
POD_IP_ENV = "POD_IP"
"""Set from the downward API (``status.podIP``): where the API listens."""
SECRET_KEY = "secret"
"""The key of the rendezvous Secret that holds the value."""
HARNESS_ONLY_ENV = (policy.RUN_ID_ENV, policy.PROCESS_ROLE_ENV)
"""The harness's process markers (its teardown scan); Kubernetes owns the
pods' lifecycle, so they are not rendered."""
PROBE = {"path": "/health", "period_s": 10, "timeout_s": 5, "failures": 3}
PORT_NAMES = {"api": "http", "rendezvous": "afd-rendezvous", "dp_rpc": "dp-rpc"}


def escape(text: str) -> str:
    """``text`` as Kubernetes passes it through: it expands ``$(VAR)`` in
    commands and env values and reads ``$$`` as ``$``."""
    return text.replace("$", "$$")


@dataclass(frozen=True)
class PodSettings:
    """What every pod of one rendering shares."""

    backend: str
    image: str
    model_root: str
    """Where the models volume is mounted (the plan's ``--model`` is under it)."""
    models_pvc: str
    """The PersistentVolumeClaim holding the weights, mounted read-only."""
    secret_name: str
    """The Secret the rendezvous secret comes from (never rendered)."""
    grace_s: int
    """``terminationGracePeriodSeconds``: the scenario's teardown grace."""


@dataclass(frozen=True)
class ServerPorts:
    """The ports one server listens on (None: not this server)."""

    api: int | None = None
    rendezvous: int | None = None
    dp_rpc: int | None = None


def server_argv(launch: RoleLaunch, dp_rpc_port: int | None) -> list[str]:
    """The plan's argv as a pod runs it: the API listens on the pod's IP
    (``--host $(POD_IP)``) and a role's DP handshake on its fixed port; every
    other argument is the plan's, escaped."""
    out: list[str] = []
    args = iter(launch.argv)
    for arg in args:
        if arg == "--host":
            next(args)
            out += ["--host", f"$({POD_IP_ENV})"]
        elif arg == "--data-parallel-rpc-port":
            next(args)
            assert dp_rpc_port is not None, launch.name
            out += [arg, str(dp_rpc_port)]
        else:
            out.append(escape(arg))
    return out


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value after ``flag`` in ``argv``; None when it is absent."""
    return argv[argv.index(flag) + 1] if flag in argv else None


def worker_command(argv: list[str], first_start: int, step: int) -> list[str]:
    """One command for every headless server of a role: ``argv`` without its
    ``--data-parallel-start-rank``, which a shell appends from the worker's
    LWS_WORKER_INDEX (1 for the first worker): ``first_start + (index - 1) x
    step``, the start ranks the plan gives them in turn."""
    at = argv.index("--data-parallel-start-rank")
    rest = argv[:at] + argv[at + 2 :]
    script = (
        'exec "$@" --data-parallel-start-rank '
        f'"$(({first_start} + (LWS_WORKER_INDEX - 1) * {step}))"'
    )
    return ["/bin/sh", "-c", escape(script), "afd-worker", *rest]


def accelerators(launch: RoleLaunch, backend: str) -> int:
    """How many devices the plan gives the server (its visible-devices list)."""
    name = DEVICE_ENV.get(backend)
    value = launch.env.get(name, "") if name else ""
    return len([d for d in value.split(",") if d.strip()])


def server_env(launch: RoleLaunch, settings: PodSettings) -> list[dict[str, Any]]:
    """The plan's environment, sorted, less the visible-devices list (the
    device plugin picks the devices; the pod sees only those), less the
    harness's markers, with the rendezvous secret taken from its Secret and,
    for a server with an API, the pod's IP."""
    out: list[dict[str, Any]] = []
    if not launch.headless:
        out.append(
            {
                "name": POD_IP_ENV,
                "valueFrom": {
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}
                },
            }
        )
    skip = {*HARNESS_ONLY_ENV, DEVICE_ENV.get(settings.backend, "")}
    for name, value in sorted(launch.env.items()):
        if name in skip:
            continue
        if name == SECRET_ENV:
            ref = {"name": settings.secret_name, "key": SECRET_KEY}
            out.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
        else:
            out.append({"name": name, "value": escape(value)})
    return out


def container(
    launch: RoleLaunch,
    command: list[str],
    ports: ServerPorts,
    settings: PodSettings,
) -> dict[str, Any]:
    """The server's one container."""
    out: dict[str, Any] = {
        "name": launch.role,
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": server_env(launch, settings),
    }
    declared = [
        {"name": PORT_NAMES[kind], "containerPort": port, "protocol": "TCP"}
        for kind, port in (
            ("api", ports.api),
            ("rendezvous", ports.rendezvous),
            ("dp_rpc", ports.dp_rpc),
        )
        if port is not None
    ]
    if declared:
        out["ports"] = declared
    devices = accelerators(launch, settings.backend)
    if devices:
        amount = {DEVICE_RESOURCE[settings.backend]: str(devices)}
        out["resources"] = {"limits": dict(amount), "requests": dict(amount)}
    if ports.api is not None:
        out["readinessProbe"] = {
            "httpGet": {"path": PROBE["path"], "port": PORT_NAMES["api"]},
            "periodSeconds": PROBE["period_s"],
            "timeoutSeconds": PROBE["timeout_s"],
            "failureThreshold": PROBE["failures"],
        }
    out["volumeMounts"] = [
        {"name": "models", "mountPath": settings.model_root, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    return out


def placement_terms(
    nodes: list[str], labels: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Node selection: one logical node by its label; several (the headless
    servers of a role on as many nodes) by node affinity, one pod per node by
    anti-affinity among the pods carrying ``labels``."""
    if len(nodes) == 1:
        return {"nodeSelector": {NODE_LABEL: nodes[0]}}
    required = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": NODE_LABEL, "operator": "In", "values": sorted(nodes)}
                ]
            }
        ]
    }
    spread = {"labelSelector": {"matchLabels": labels}, "topologyKey": NODE_LABEL}
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": required
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [spread]
            },
        }
    }


def pod_template(
    launch: RoleLaunch,
    command: list[str],
    ports: ServerPorts,
    settings: PodSettings,
    *,
    nodes: list[str],
    labels: dict[str, str],
) -> dict[str, Any]:
    """A PodTemplateSpec for ``launch`` (or every headless server of its role,
    with ``command`` from ``worker_command``) on ``nodes``. The pod uses its
    node's network: see ``afd_e2e.render.k8s`` for why."""
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": settings.grace_s,
        **placement_terms(nodes, labels),
        "containers": [container(launch, command, ports, settings)],
        "volumes": [
            {
                "name": "models",
                "persistentVolumeClaim": {
                    "claimName": settings.models_pvc,
                    "readOnly": True,
                },
            },
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    pod_labels = dict(labels)
    if len(nodes) == 1:
        pod_labels[NODE_LABEL] = nodes[0]
    return {"metadata": {"labels": pod_labels}, "spec": spec}
