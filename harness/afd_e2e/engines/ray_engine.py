# SPDX-License-Identifier: Apache-2.0
"""The ``ray`` engine: one actor per server, on the Ray node that offers the
server's logical node as the resource ``afd-node-<name>``.

The actor (:mod:`afd_e2e.engines.ray_agent`) owns the server's process group,
log file and SIGTERM -> grace -> SIGKILL stop; the harness keeps the verdict:
a forced SIGKILL on any node still fails the run (AFD-I12), and after the
stop a marker scan on every node of the placement proves nothing is left.

vLLM keeps its own ``mp`` backend inside each server: the agent starts it
without Ray's environment, so a server never joins this cluster."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray

from afd_e2e.define.scenario import Scenario
from afd_e2e.engines.base import EngineError
from afd_e2e.engines.ray_agent import ServerAgent, scan_node
from afd_e2e.engines.ray_cluster import (
    DEFAULT_STATE_DIR,
    ClusterState,
    node_resource,
)
from afd_e2e.launch.plan import HOST, LaunchPlan, NodeAddresses, RoleLaunch, masked_env
from afd_e2e.processes.readiness import Probe, poll_until_ready
from afd_e2e.processes.role_errors import (
    ProcessDiedError,
    ReadinessTimeoutError,
    RoleError,
)
from afd_e2e.processes.role_logs import LOG_TAIL_LINES, NOT_READY_TAIL_LINES, quote_tail
from afd_e2e.processes.teardown_record import TeardownRecord, merge_records
from afd_e2e.processes.terminal import ReadinessLine, say, started_line

CALL_TIMEOUT_S = 60.0
"""Bound of one call to an agent (start, poll, tail)."""
PROGRESS_EVERY_S = 10.0
"""How often a wait for readiness prints who it still waits for (off a
terminal; on one its line is updated in place every second)."""
PLACEMENT_SHARE = 0.001
"""How much of a node's ``afd-node-*`` resource one server takes: any number
of servers fit, and only on that node."""


class _NodeAgent(ServerAgent):
    """The agent as a Ray actor: it also says which Ray node it runs on."""

    def ray_node(self) -> str:
        return ray.get_runtime_context().get_node_id()


_Agent = ray.remote(num_cpus=0, max_restarts=0)(_NodeAgent)
_scan = ray.remote(num_cpus=0, max_retries=0)(scan_node)


def _node_resources() -> dict[str, set[str]]:
    """Alive Ray node id -> the resources it offers."""
    return {
        node["NodeID"]: set(node.get("Resources", {}))
        for node in ray.nodes()
        if node.get("Alive")
    }


class RayServers:
    """The plan's servers, each owned by an actor on its node. Their output
    stays in their log files (on their nodes): nothing is streamed."""

    def __init__(self, plan: LaunchPlan, scenario: Scenario) -> None:
        self.plan = plan
        self.scenario = scenario
        self.grace_s = scenario.timeouts.teardown_grace_s
        self._agents: dict[str, tuple[RoleLaunch, Any, dict[str, Any], float]] = {}
        self._ready: dict[str, float] = {}
        self._record: TeardownRecord | None = None
        self._may_exit: set[str] = set()
        """Servers a check killed, or whose exit it expects: not checked."""

    @staticmethod
    def _name(launch: RoleLaunch) -> str:
        return f"{launch.role}:{launch.rank}"

    def _placement(self, launch: RoleLaunch) -> dict[str, Any]:
        if launch.node is None:
            return {}
        return {"resources": {node_resource(launch.node): PLACEMENT_SHARE}}

    def start_server(self, launch: RoleLaunch) -> None:
        name = self._name(launch)
        agent = _Agent.options(**self._placement(launch)).remote(
            self.plan.run_id,
            str(Path(self.plan.run_dir).resolve()),
            self.plan.scenario_id,
            self.grace_s,
            self.scenario.teardown.sigkill == "marker-scan",
        )
        try:
            # Where it landed, checked before anything starts there.
            node_id = ray.get(agent.ray_node.remote(), timeout=CALL_TIMEOUT_S)
            offered = _node_resources().get(node_id, set())
            if launch.node is not None and node_resource(launch.node) not in offered:
                raise RuntimeError(
                    f"Ray placed it on node {node_id}, which does not offer "
                    f"{node_resource(launch.node)}"
                )
            where = ray.get(
                agent.start.remote(
                    launch.role, launch.rank, list(launch.argv), dict(launch.env)
                ),
                timeout=CALL_TIMEOUT_S,
            )
            where["ray_node"] = node_id
        except Exception as exc:
            ray.kill(agent)
            raise RoleError(
                f"{name}: its Ray actor could not start it: {exc}", [name]
            ) from None
        self._agents[name] = (launch, agent, where, time.monotonic())
        port = None if launch.headless else launch.api_port
        node = launch.node or "any node"
        say(started_line(name, where["pid"], port, where["log"], node))

    def check_alive(self, during: str = "the run") -> None:
        for name, (launch, agent, where, started) in self._agents.items():
            if name in self._may_exit:
                continue
            try:
                code = ray.get(agent.exit_code.remote(), timeout=CALL_TIMEOUT_S)
                if code is None:
                    continue
                tail = ray.get(
                    agent.tail.remote(LOG_TAIL_LINES), timeout=CALL_TIMEOUT_S
                )
            except ray.exceptions.RayError as exc:
                raise RoleError(
                    f"{name}: the Ray actor owning it on {launch.node} is gone "
                    f"during {during}: {exc}",
                    [name],
                ) from None
            elapsed = time.monotonic() - started
            raise ProcessDiedError(
                name,
                code,
                Path(where["log"]),
                tail,
                f"{name} (pid {where['pid']} on {launch.node}) exited with code "
                f"{code} during {during}, {elapsed:.1f} s after launch; last "
                f"{len(tail)} lines of {where['log']}:\n{quote_tail(tail)}",
            )

    def wait_ready(
        self, probes: Mapping[str, Probe | None], timeout_s: float, poll_s: float = 0.5
    ) -> dict[str, float]:

        def on_ready(name: str) -> None:
            self._ready[name] = time.monotonic() - self._agents[name][3]

        starts = {n: entry[3] for n, entry in self._agents.items()}
        with ReadinessLine(starts, PROGRESS_EVERY_S) as line:
            poll_until_ready(
                {n: probes.get(n) for n in self._agents if n not in self._ready},
                timeout_s=timeout_s,
                poll_s=poll_s,
                check_alive=lambda: self.check_alive("start-up"),
                on_ready=on_ready,
                not_ready=self._not_ready,
                progress=line.progress,
                progress_every_s=1.0,
            )
            ready = {n: self._ready[n] for n in self._agents}
            line.close(ready)
        return ready

    def _not_ready(
        self, pending: Mapping[str, object], seen: Mapping[str, str], waited: float
    ) -> ReadinessTimeoutError:
        parts = []
        for name in pending:
            _, agent, where, _ = self._agents[name]
            try:
                tail = ray.get(
                    agent.tail.remote(NOT_READY_TAIL_LINES), timeout=CALL_TIMEOUT_S
                )
            except ray.exceptions.RayError as exc:
                tail = [f"(log unavailable: {exc})"]
            parts.append(
                f"{name} not ready (last probe: {seen.get(name)}); last "
                f"{len(tail)} lines of {where['log']}:\n{quote_tail(tail)}"
            )
        return ReadinessTimeoutError(
            f"not ready after {waited:.1f} s: {', '.join(pending)}\n"
            + "\n".join(parts),
            list(pending),
        )

    def kill_process(self, name: str) -> list[Any]:
        """SIGKILL one server on its node (the agent records it as injected)."""
        launch, agent, _, _ = self._agents[name]
        self._may_exit.add(name)
        try:
            return ray.get(agent.kill.remote(), timeout=CALL_TIMEOUT_S)
        except ray.exceptions.RayError as exc:
            raise RoleError(
                f"{name}: the Ray actor owning it on {launch.node} could not "
                f"kill it: {exc}",
                [name],
            ) from None

    def expect_exit(self, name: str) -> None:
        if name not in self._agents:
            raise ValueError(f"{name} was never started")
        self._may_exit.add(name)

    def commands(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "argv": list(launch.argv),
                "env": masked_env(dict(launch.env)),
                "cwd": None,
                "log": where["log"],
                "pid": where["pid"],
                "node": launch.node,
                "host": where["host"],
                "ray_node": where["ray_node"],
            }
            for name, (launch, _, where, _) in self._agents.items()
        }

    def stop(self) -> TeardownRecord:
        """Every agent stops its server at once (each with the full grace),
        then every placement node is scanned for the run's marker."""
        if self._record is not None:
            return self._record
        records: list[TeardownRecord] = []
        errors: list[str] = []
        calls = {
            name: agent.stop.remote() for name, (_, agent, _, _) in self._agents.items()
        }
        for name, call in calls.items():
            try:
                records.append(ray.get(call, timeout=self.grace_s + CALL_TIMEOUT_S))
            except Exception as exc:
                errors.append(f"{name}: its Ray actor could not stop it: {exc}")
        final = TeardownRecord(
            self.grace_s, self.scenario.teardown.sigkill == "marker-scan"
        )
        final.errors += errors
        final.leaks += self._scan_nodes(final.errors)
        for _, agent, _, _ in self._agents.values():
            ray.kill(agent)
        self._record = merge_records([*records, final]) if records else final
        return self._record

    def _scan_nodes(self, errors: list[str]) -> list:
        nodes = sorted({la.node for la, _, _, _ in self._agents.values() if la.node})
        found = []
        for node in nodes:
            task = _scan.options(
                resources={node_resource(node): PLACEMENT_SHARE}
            ).remote(self.plan.run_id)
            try:
                found += ray.get(task, timeout=CALL_TIMEOUT_S)
            except Exception as exc:
                errors.append(f"marker scan of node {node} failed: {exc}")
        return found


class RayEngine:
    """Attach to a Ray cluster: ``address``, else the one ``afd-e2e cluster
    up`` recorded in ``state_dir``."""

    name = "ray"

    def __init__(
        self, address: str | None, state_dir: Path = DEFAULT_STATE_DIR
    ) -> None:
        self.local = ClusterState.load(state_dir) if address is None else None
        if address is None:
            if self.local is None:
                raise EngineError(
                    f"--engine ray: no cluster to attach to; pass --ray-address "
                    f"HOST:PORT, or start a local one with `afd-e2e cluster up` "
                    f"(none recorded in {state_dir}); nothing was started"
                )
            address = self.local.address
        self.address = address
        self.ray_nodes: dict[str, tuple[str, str]] = {}
        """Logical node -> (Ray node id, its address), once resolved."""
        try:
            ray.init(
                address=address,
                namespace="afd-e2e",
                log_to_driver=False,
                logging_level="ERROR",
                configure_logging=False,
            )
        except Exception as exc:
            raise EngineError(
                f"--engine ray: cannot attach to the Ray cluster at {address}: {exc}; "
                "nothing was started"
            ) from None

    def node_addresses(
        self, scenario: Scenario, *, dry_run: bool = False
    ) -> NodeAddresses:
        del dry_run  # resolving reads the cluster; it starts nothing
        offered: dict[str, str] = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            for key in node.get("Resources", {}):
                if key.startswith(node_resource("")):
                    name = key[len(node_resource("")) :]
                    offered[name] = node["NodeManagerAddress"]
                    self.ray_nodes[name] = (node["NodeID"], node["NodeManagerAddress"])
        missing = [n for n in scenario.nodes if n not in offered]
        if missing:
            have = ", ".join(sorted(offered)) or "none"
            raise EngineError(
                f"the Ray cluster at {self.address} offers no node for "
                f"{', '.join(missing)} (it offers: {have}); start a worker there "
                f"with ray start --resources '{{\"{node_resource(missing[0])}\": 1}}'"
                ", or `afd-e2e cluster up --nodes "
                f"{','.join(scenario.nodes)}`; nothing was started"
            )
        if self.local is not None:
            # All nodes of a local cluster are this machine: servers stay on
            # loopback (Ray itself reports the machine's outside address).
            return {n: HOST for n in scenario.nodes}
        return {n: offered[n] for n in scenario.nodes}

    def describe_nodes(self) -> list[str]:
        """Where the logical nodes are in the cluster (for ``--dry-run``)."""
        return [
            f"ray      {name} -> Ray node {node_id[:12]} at {address}"
            for name, (node_id, address) in sorted(self.ray_nodes.items())
        ]

    def servers(
        self, plan: LaunchPlan, scenario: Scenario, *, stream_logs: bool
    ) -> RayServers:
        if stream_logs:
            say(
                "afd-e2e: --stream-logs: the ray engine streams nothing; each "
                "server's output is in its log file on its node"
            )
        return RayServers(plan, scenario)

    def close(self) -> None:
        if ray.is_initialized():
            ray.shutdown()


__all__ = ["RayEngine", "RayServers"]
