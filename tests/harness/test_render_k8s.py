# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e render ID --engine k8s``: the manifests are valid (core objects by
kubernetes-validate in strict mode, LeaderWorkerSets by the pinned LWS v1
schema in tests/data and their pod templates by kubernetes-validate's
PodTemplateSpec), deterministic, and say what a cluster needs to run the plan:
the FFN leader's name as the AFD host, the headless workers' start ranks, one
accelerator per device, no address and no secret value."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate as kv
import pytest
import yaml
from lint_repo import ROOT

from afd_e2e.cli import main
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.define.scenario import Placement, Scenario
from afd_e2e.render.k8s import K8sOptions, RenderError, default_name, render_k8s
from afd_e2e.render.k8s_manifest import LWS_API_VERSION, LWS_RELEASE
from afd_e2e.render.k8s_pod import DEVICE_RESOURCE, NODE_LABEL, SERVER_LABEL

CATALOGUE = Catalogue.load(ROOT)
SCENARIOS = CATALOGUE.scenarios()
MULTI_NODE = sorted(i for i, s in SCENARIOS.items() if s.placement is not None)
ONE_NODE = ["cpu-eager-1a1f", "afd-eager-2a2f", "npu-afd-eager-2a2f", "baseline-graph"]
LWS_SCHEMA = json.loads(
    (ROOT / "tests/data/lws-v1-leaderworkerset.schema.json").read_text()
)
# LWS v0.10 needs Kubernetes >= 1.26 (1.27 on without a feature gate); the
# newest schemas kubernetes-validate bundles.
K8S_VERSIONS = ("1.27", kv.latest_version())
IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
SENTINEL = "0123456789abcdef-not-a-secret-sentinel"


def validate(doc: dict[str, Any]) -> None:
    """Raise when ``doc`` is not a valid object of its kind."""
    if doc["kind"] == "LeaderWorkerSet":
        jsonschema.Draft202012Validator(LWS_SCHEMA).validate(doc)
        template = doc["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in template:
                # a PodTemplate's `template` is the PodTemplateSpec definition
                wrapped = {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": doc["metadata"]["name"]},
                    "template": template[key],
                }
                for version in K8S_VERSIONS:
                    kv.validate(wrapped, version, strict=True)
        return
    for version in K8S_VERSIONS:
        kv.validate(doc, version, strict=True)


def rendered(sid: str, **options: Any) -> tuple[str, list[dict[str, Any]]]:
    text = render_k8s(sid, SCENARIOS[sid], K8sOptions(**options)).to_yaml()
    return text, list(yaml.safe_load_all(text))


def leader_worker_sets(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Role -> its LeaderWorkerSet."""
    return {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in docs
        if d["kind"] == "LeaderWorkerSet"
    }


def templates(lws: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(leader template, worker template or None); a group of one runs its
    leader from the worker template."""
    spec = lws["spec"]["leaderWorkerTemplate"]
    if "leaderTemplate" in spec:
        return spec["leaderTemplate"], spec["workerTemplate"]
    return spec["workerTemplate"], None


def container(template: dict[str, Any]) -> dict[str, Any]:
    (only,) = template["spec"]["containers"]
    return only


def arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def model_of(command: list[str]) -> str:
    """The weights a server loads: the positional argument of ``vllm serve``
    (a headless workers' command is a shell line that runs the rest)."""
    assert "--model" not in command
    words = command[4:] if command[0] == "/bin/sh" else command
    assert words[1:4] == ["-m", "afd_plugin.vllm_cli", "serve"], words
    return words[4]


def start_rank(template: dict[str, Any], worker_index: int) -> int:
    """The ``--data-parallel-start-rank`` the pod with LWS_WORKER_INDEX
    ``worker_index`` runs with, as its shell would compute it."""
    command = container(template)["command"]
    if command[0] != "/bin/sh":
        return int(arg(command, "--data-parallel-start-rank"))
    script = command[2].replace("$$", "$")  # as Kubernetes passes it on
    done = subprocess.run(
        ["/bin/sh", "-c", script, command[3], "printf", "%s\n"],
        env={"LWS_WORKER_INDEX": str(worker_index), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    flag, value = done.stdout.split()
    assert flag == "--data-parallel-start-rank"
    return int(value)


def afd_host(command: list[str]) -> str:
    return json.loads(arg(command, "--additional-config"))["afd"]["host"]


def test_the_catalogue_has_multi_node_examples_for_every_backend() -> None:
    backends = {SCENARIOS[i].backend for i in MULTI_NODE}
    assert backends == {"cpu", "cuda", "npu"}
    for sid in MULTI_NODE:
        s = SCENARIOS[sid]
        assert s.backend == "cpu" or s.tier == "nightly", sid


@pytest.mark.parametrize("sid", MULTI_NODE + ONE_NODE)
def test_every_object_validates(sid: str) -> None:
    text, docs = rendered(sid)
    kinds = [d["kind"] for d in docs]
    # one per role, and one per standby FFN server
    groups = (2 if SCENARIOS[sid].afd else 1) + SCENARIOS[sid].standbys
    assert kinds.count("LeaderWorkerSet") == groups
    assert kinds.count("Service") >= 1
    for doc in docs:
        validate(doc)
    assert text.startswith(f"# AFD scenario {sid}:") or not SCENARIOS[sid].afd
    assert f"LeaderWorkerSet controller {LWS_RELEASE}" in text


@pytest.mark.parametrize(
    "break_it",
    [
        lambda d: container(templates(d)[0]).update(bogus=True),
        lambda d: container(templates(d)[0])["env"][0].update(valueFrm={}),
        lambda d: templates(d)[0]["spec"].update(hostNetwrk=True),
        lambda d: container(templates(d)[0]).update(command="python3 -m vllm"),
        lambda d: d["spec"].update(leaderWorkerTemplte={}),
        lambda d: d["spec"]["leaderWorkerTemplate"].update(size=0),
        lambda d: d["spec"]["leaderWorkerTemplate"].update(restartPolicy="Always"),
        lambda d: templates(d)[0]["metadata"].update(generateName="x-"),
        lambda d: d["metadata"].update(name="Attention_0"),
    ],
    ids=[
        "unknown-container-field",
        "misspelt-env-source",
        "unknown-pod-spec-field",
        "command-not-a-list",
        "unknown-lws-spec-field",
        "lws-size-zero",
        "lws-unknown-restart-policy",
        "template-metadata-outside-the-crd",
        "lws-name-not-a-dns-label",
    ],
)
def test_a_broken_leader_worker_set_is_rejected(break_it) -> None:
    _, docs = rendered("afd-eager-3node-16a8f")
    lws = copy.deepcopy(leader_worker_sets(docs)["attention"])
    validate(lws)
    break_it(lws)
    with pytest.raises(jsonschema.ValidationError):
        validate(lws)


@pytest.mark.parametrize(
    "break_it",
    [
        lambda s: s["spec"].update(publishNotReady=True),
        lambda s: s["spec"]["ports"][0].update(port="29650"),
        lambda s: s.update(status_={}),
    ],
    ids=["unknown-spec-field", "port-not-an-integer", "unknown-top-level-field"],
)
def test_a_broken_service_is_rejected(break_it) -> None:
    _, docs = rendered("afd-eager-3node-16a8f")
    service = copy.deepcopy(next(d for d in docs if d["kind"] == "Service"))
    validate(service)
    break_it(service)
    with pytest.raises(jsonschema.ValidationError):
        validate(service)


@pytest.mark.parametrize("sid", ["npu-afd-eager-4node-24a8f", "cpu-eager-1a1f"])
def test_rendering_is_deterministic(sid: str, tmp_path: Path, capsys) -> None:
    # each plan picks free ports and a fresh secret; neither may show
    first, _ = rendered(sid)
    assert rendered(sid)[0] == first
    out = tmp_path / "m.yaml"
    assert main(["render", sid, "--engine", "k8s", "-o", str(out)]) == 0
    assert out.read_text() == first
    assert main(["render", sid, "--engine", "k8s"]) == 0
    assert capsys.readouterr().out == first


@pytest.mark.parametrize("sid", MULTI_NODE)
def test_the_rendezvous_node_is_the_afd_host_of_every_server(sid: str) -> None:
    """The first FFN server's node, or the first attention server's when
    there are standbys (the rendezvous must outlive any FFN server)."""
    s = SCENARIOS[sid]
    assert s.placement is not None
    name = default_name(sid)
    host_role = "attention" if s.standbys else "ffn"
    ffn_node = getattr(s.placement, host_role)[0].node
    host = f"{name}-node-{ffn_node}"
    _, docs = rendered(sid)
    commands = [
        container(t)["command"]
        for lws in leader_worker_sets(docs).values()
        for t in templates(lws)
        if t is not None
    ]
    assert len(commands) >= 2
    assert {afd_host(c) for c in commands} == {host}
    # the name is a headless Service selecting the FFN leader's node, with
    # the rendezvous port every server's config names
    service = next(d for d in docs if d["metadata"]["name"] == host)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"][NODE_LABEL] == ffn_node
    port = json.loads(arg(commands[0], "--additional-config"))["afd"]["port"]
    assert {"name": "afd-rendezvous", "port": port, "protocol": "TCP"} in service[
        "spec"
    ]["ports"]
    host_leader, _ = templates(leader_worker_sets(docs)[host_role])
    assert host_leader["spec"]["nodeSelector"] == {NODE_LABEL: ffn_node}
    assert host_leader["metadata"]["labels"][NODE_LABEL] == ffn_node
    declared = {p["name"] for p in container(host_leader).get("ports", [])}
    assert "afd-rendezvous" in declared


@pytest.mark.parametrize("sid", MULTI_NODE)
def test_each_role_is_one_group_with_its_headless_workers(sid: str) -> None:
    s = SCENARIOS[sid]
    assert s.placement is not None
    name = default_name(sid)
    _, docs = rendered(sid)
    for role, lws in leader_worker_sets(docs).items():
        if role.startswith("standby-"):
            continue  # a group of its own (test_each_standby_is_a_group_of_one)
        entries = getattr(s.placement, role)
        assert lws["metadata"]["name"] == f"{name}-{role}"
        assert lws["spec"]["replicas"] == 1
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == len(entries)
        leader, worker = templates(lws)
        command = container(leader)["command"]
        assert "--headless" not in command
        assert leader["spec"]["nodeSelector"] == {NODE_LABEL: entries[0].node}
        if worker is None:
            assert len(entries) == 1
            continue
        worker_command = container(worker)["command"]
        assert "--headless" in worker_command
        # through `vllm serve`, the one command that acts on --headless
        assert "-m afd_plugin.vllm_cli serve" in " ".join(worker_command)
        assert "--host" not in worker_command and "readinessProbe" not in (
            container(worker)
        )
        starts = [sum(e.dp_local for e in entries[:i]) for i in range(len(entries))]
        for index in range(1, len(entries)):
            assert start_rank(worker, index) == starts[index], (role, index)
        for cmd, entry in ((command, entries[0]), (worker_command, entries[1])):
            assert arg(cmd, "--data-parallel-size-local") == str(entry.dp_local)
            assert arg(cmd, "--data-parallel-address") == (
                f"{name}-node-{entries[0].node}"
            )
        nodes = sorted({e.node for e in entries[1:]})
        if len(nodes) == 1:
            assert worker["spec"]["nodeSelector"] == {NODE_LABEL: nodes[0]}
        else:  # spread over exactly those nodes, one each
            affinity = worker["spec"]["affinity"]
            (term,) = affinity["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert term["matchExpressions"][0]["values"] == nodes
            (spread,) = affinity["podAntiAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            assert spread["topologyKey"] == NODE_LABEL
            assert spread["labelSelector"]["matchLabels"][SERVER_LABEL] == "worker"


def test_three_attention_servers_take_start_ranks_8_and_16() -> None:
    _, docs = rendered("npu-afd-eager-4node-24a8f")
    _, worker = templates(leader_worker_sets(docs)["attention"])
    assert worker is not None
    assert [start_rank(worker, i) for i in (1, 2)] == [8, 16]


@pytest.mark.parametrize("sid", MULTI_NODE + ONE_NODE)
def test_accelerator_requests_equal_the_devices(sid: str) -> None:
    s = SCENARIOS[sid]
    _, docs = rendered(sid)
    for role, lws in leader_worker_sets(docs).items():
        if s.placement is not None:
            entries = getattr(s.placement, "ffn" if role == "ffn" else "attention")
            wanted = [len(e.devices) for e in entries]
        else:
            topo = s.topology.ffn if role == "ffn" else s.topology.attention
            assert topo is not None
            wanted = [len(topo.devices)]
        assert len(set(wanted[1:])) <= 1  # the workers share one template
        for template, count in zip(
            templates(lws), (wanted[0], wanted[-1]), strict=True
        ):
            if template is None:
                continue
            c = container(template)
            names = {e["name"] for e in c["env"]}
            assert not names & {"CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"}
            if s.backend == "cpu":
                assert "resources" not in c
                continue
            resource = DEVICE_RESOURCE[s.backend]
            assert c["resources"] == {
                "limits": {resource: str(count)},
                "requests": {resource: str(count)},
            }


@pytest.mark.parametrize("sid", MULTI_NODE + ONE_NODE)
def test_no_address_and_no_secret_value_is_rendered(sid: str, monkeypatch) -> None:
    import afd_e2e.launch.plan as launch

    monkeypatch.setattr(launch.secrets, "token_hex", lambda n: SENTINEL)
    plan_secret = launch.secrets.token_hex(16)
    text, docs = rendered(sid)
    assert plan_secret not in text
    if SCENARIOS[sid].placement is not None:
        assert IPV4.findall(text) == []
        secret = f"{default_name(sid)}-rendezvous"
        assert f"kubectl create secret generic {secret} " in text
        for lws in leader_worker_sets(docs).values():
            for template in templates(lws):
                if template is None:
                    continue
                env = {e["name"]: e for e in container(template)["env"]}
                ref = env["AFD_RENDEZVOUS_SECRET"]["valueFrom"]["secretKeyRef"]
                assert ref == {"name": secret, "key": "secret"}
                assert "value" not in env["AFD_RENDEZVOUS_SECRET"]
    else:  # one node: the roles meet on the node's loopback, nothing else
        assert set(IPV4.findall(text)) <= {"127.0.0.1"}
        assert "AFD_RENDEZVOUS_SECRET" not in text
        assert "Secret" not in text


@pytest.mark.parametrize("sid", MULTI_NODE + ONE_NODE)
def test_every_name_an_argv_uses_is_a_service(sid: str) -> None:
    name = default_name(sid)
    _, docs = rendered(sid)
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    used = set()
    for lws in leader_worker_sets(docs).values():
        for template in templates(lws):
            if template is None:
                continue
            for word in container(template)["command"]:
                used.update(re.findall(rf"{name}-node-[a-z0-9-]+[a-z0-9]", word))
    assert used <= services
    assert (len(used) > 0) == (SCENARIOS[sid].placement is not None)


@pytest.mark.parametrize("sid", MULTI_NODE + ONE_NODE)
def test_the_api_is_served_by_the_leader_on_its_pod_ip(sid: str) -> None:
    name = default_name(sid)
    _, docs = rendered(sid)
    api = next(d for d in docs if d["metadata"]["name"] == f"{name}-api")
    selector = api["spec"]["selector"]
    groups = leader_worker_sets(docs)
    api_role = "attention" if SCENARIOS[sid].afd else "baseline"
    for role, lws in groups.items():
        for template in templates(lws):
            if template is None:
                continue
            labels = template["metadata"]["labels"]
            selected = selector.items() <= labels.items()
            is_leader = labels[SERVER_LABEL] == "leader"
            assert selected == (role == api_role and is_leader), (role, labels)
            c = container(template)
            if not is_leader:
                continue
            # every server with an API listens on its pod's IP and is probed
            assert arg(c["command"], "--host") == "$(POD_IP)"
            assert c["env"][0] == {
                "name": "POD_IP",
                "valueFrom": {
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}
                },
            }
            (http,) = [p for p in c["ports"] if p["name"] == "http"]
            assert http["containerPort"] == int(arg(c["command"], "--port"))
            assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
            assert template["spec"]["hostNetwork"] is True


def with_attention(sid: str, entries: list[dict[str, Any]]) -> Scenario:
    s = SCENARIOS[sid]
    assert s.placement is not None
    placement = s.placement.model_dump()
    placement["attention"] = entries
    return s.model_copy(update={"placement": Placement.model_validate(placement)})


@pytest.mark.parametrize(
    "entries, message",
    [
        (
            [
                {"node": "npu-attn-0", "dp_local": 8, "devices": list(range(8))},
                {"node": "npu-attn-1", "dp_local": 4, "devices": list(range(4))},
                {"node": "npu-attn-2", "dp_local": 8, "devices": list(range(8))},
                {"node": "npu-attn-2", "dp_local": 4, "devices": list(range(8, 12))},
            ],
            "differ in more than their start rank",
        ),
        (
            [
                {"node": "npu-attn-0", "dp_local": 6, "devices": list(range(6))},
                {"node": "npu-attn-1", "dp_local": 6, "devices": list(range(6))},
                {"node": "npu-attn-2", "dp_local": 6, "devices": list(range(6))},
                {"node": "npu-attn-2", "dp_local": 6, "devices": list(range(6, 12))},
            ],
            "span several nodes with more than one on some",
        ),
    ],
    ids=["unlike-workers", "two-workers-on-one-of-several-nodes"],
)
def test_workers_one_template_cannot_run_are_refused(entries, message) -> None:
    scenario = with_attention("npu-afd-eager-4node-24a8f", entries)
    with pytest.raises(RenderError, match=message) as refused:
        render_k8s("npu-afd-eager-4node-24a8f", scenario)
    assert str(refused.value).startswith("npu-afd-eager-4node-24a8f: ")


def test_workers_alike_on_one_node_share_its_selector() -> None:
    scenario = with_attention(
        "npu-afd-eager-4node-24a8f",
        [
            {"node": "npu-attn-0", "dp_local": 8, "devices": list(range(8))},
            {"node": "npu-attn-1", "dp_local": 8, "devices": list(range(8))},
            {"node": "npu-attn-1", "dp_local": 8, "devices": list(range(8, 16))},
        ],
    )
    docs = list(yaml.safe_load_all(render_k8s("x", scenario).to_yaml()))
    _, worker = templates(leader_worker_sets(docs)["attention"])
    assert worker is not None
    assert worker["spec"]["nodeSelector"] == {NODE_LABEL: "npu-attn-1"}
    assert "affinity" not in worker["spec"]
    assert [start_rank(worker, i) for i in (1, 2)] == [8, 16]
    for doc in docs:
        validate(doc)


def test_the_render_command_refuses_bad_input(capsys) -> None:
    assert main(["render", "no-such-scenario", "--engine", "k8s"]) == 2
    assert "no scenario 'no-such-scenario'" in capsys.readouterr().err
    sid = "afd-dsv4-flash-async-cam-dp2tp4-ep8"  # awaits a role-split model
    assert main(["render", sid, "--engine", "k8s"]) == 2
    err = capsys.readouterr().err
    assert f"{sid} needs what is not in this build" in err
    assert main(["render", "cpu-2node-1a1f", "--name", "Bad_Name"]) == 2
    assert "cpu-2node-1a1f: name 'Bad_Name' must be a DNS-1035 label" in (
        capsys.readouterr().err
    )
    long_name = "a" * 45
    assert main(["render", "cpu-2node-1a1f", "--name", long_name]) == 2
    assert "choose a shorter prefix with --name" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["render", "cpu-2node-1a1f", "--engine", "ray"])
    assert exited.value.code == 2


def test_options_reach_the_pods() -> None:
    text, docs = rendered(
        "afd-eager-3node-16a8f",
        image="registry.example/afd:1",
        model_root="/mnt/weights",
        models_pvc="weights",
        name="dsv2",
    )
    for lws in leader_worker_sets(docs).values():
        assert lws["metadata"]["name"].startswith("dsv2-")
        for template in templates(lws):
            if template is None:
                continue
            c = container(template)
            assert c["image"] == "registry.example/afd:1"
            assert model_of(c["command"]) == "/mnt/weights/deepseek-ai/DeepSeek-V2-Lite"
            volumes = {v["name"]: v for v in template["spec"]["volumes"]}
            assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "weights"
    names = [d["metadata"]["name"] for d in docs]
    assert all(n.startswith("dsv2-") for n in names), names
    assert "Secret dsv2-rendezvous" in text
    assert LWS_API_VERSION in text


def test_the_render_package_is_pure() -> None:
    code = (
        "import sys\n"
        "for m in ('torch', 'vllm', 'ray', 'kubernetes', 'kubernetes_validate'):\n"
        "    sys.modules[m] = None\n"
        "from afd_e2e.cli import main\n"
        "assert main(['render', 'cpu-2node-2a1f', '--engine', 'k8s']) == 0\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "kind: LeaderWorkerSet" in done.stdout


def test_each_standby_is_a_group_of_one_on_its_node() -> None:
    """A standby FFN server runs one rank with its own API: an LWS of size 1
    of its own on its placement node, with the FFN role's args and the afd
    config of a standby; the attention leader hosts the rendezvous."""
    sid = "cpu-2node-1a1f-failover"
    s = SCENARIOS[sid]
    assert s.placement is not None and s.standbys == 1
    name = default_name(sid)
    _, docs = rendered(sid)
    groups = leader_worker_sets(docs)
    assert sorted(groups) == ["attention", "ffn", "standby-0"]
    lws = groups["standby-0"]
    assert lws["metadata"]["name"] == f"{name}-standby-0"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 1
    leader, worker = templates(lws)
    assert worker is None
    command = container(leader)["command"]
    assert "--headless" not in command and "readinessProbe" in container(leader)
    assert arg(command, "--data-parallel-size") == "1"
    assert arg(command, "--tensor-parallel-size") == "1"
    afd = json.loads(arg(command, "--additional-config"))["afd"]
    assert afd["role"] == "ffn" and afd["standby"] is True
    assert afd["num_ffn_standby"] == 1
    assert afd["host"] == f"{name}-node-{s.placement.attention[0].node}"
    assert leader["spec"]["nodeSelector"] == {NODE_LABEL: s.placement.standby[0].node}
    ports = {p["name"] for p in container(leader)["ports"]}
    assert "afd-rendezvous" not in ports
    ffn_leader, _ = templates(groups["ffn"])
    assert "afd-rendezvous" not in {
        p["name"] for p in container(ffn_leader).get("ports", [])
    }
