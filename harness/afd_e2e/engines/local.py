# SPDX-License-Identifier: Apache-2.0
"""The ``local`` engine: every server is a subprocess of the harness on this
machine. One node (no placement) or a placement on loopback runs as it always
did; with ``--node-network netns`` each logical node gets its own network
namespace, so addresses, and the traffic between nodes, really differ."""

from __future__ import annotations

import secrets
from typing import Literal

from afd_e2e.define.scenario import Scenario
from afd_e2e.engines.base import EngineError
from afd_e2e.engines.netns import NodeNetwork
from afd_e2e.launch.plan import LaunchPlan, NodeAddresses, RoleLaunch, loopback_nodes
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.role_process import ProcessSpec

NodeNetworkKind = Literal["loopback", "netns"]


class LocalServers(ProcessManager):
    """A :class:`ProcessManager` that starts plan entries, each inside its
    node's namespace when there is one."""

    def __init__(self, *args, network: NodeNetwork | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.network = network

    def start_server(self, launch: RoleLaunch) -> None:
        argv, env = list(launch.argv), dict(launch.env)
        if self.network is not None and launch.node is not None:
            argv = self.network.wrap(launch.node, argv)
            env = {**self.network.env(launch.node), **env}
        port = None if launch.headless else launch.api_port
        self.start(ProcessSpec(launch.role, launch.rank, argv, env, port=port))


class LocalEngine:
    """Subprocesses on this machine; ``network`` picks how nodes are told apart."""

    name = "local"

    def __init__(self, network: NodeNetworkKind = "loopback") -> None:
        self.network_kind = network
        self.network: NodeNetwork | None = None
        self.tag = secrets.token_hex(4)
        """Names this engine's namespaces apart from any other run's."""

    def node_addresses(
        self, scenario: Scenario, *, dry_run: bool = False
    ) -> NodeAddresses:
        if self.network_kind == "loopback" or not scenario.nodes:
            return loopback_nodes(scenario)
        if dry_run:  # the addresses it would give; nothing is created
            return NodeNetwork(self.tag, scenario.nodes).addresses
        problem = NodeNetwork.unavailable()
        if problem is not None:
            raise EngineError(
                f"--node-network netns: {problem}; run with --node-network "
                "loopback (every node on 127.0.0.1) or --engine ray instead; "
                "nothing was started"
            )
        self.network = NodeNetwork(self.tag, scenario.nodes)
        self.network.create()
        return self.network.addresses

    def servers(
        self, plan: LaunchPlan, scenario: Scenario, *, stream_logs: bool
    ) -> LocalServers:
        if self.network_kind == "netns" and scenario.nodes and self.network is None:
            raise EngineError("node_addresses() must run before servers()")
        return LocalServers(
            plan.run_id,
            plan.run_dir,
            scenario_id=plan.scenario_id,
            marker_scan=scenario.teardown.sigkill == "marker-scan",
            grace_s=scenario.timeouts.teardown_grace_s,
            stream_logs=stream_logs,
            network=self.network,
        )

    def close(self) -> None:
        if self.network is not None:
            self.network.destroy()
            self.network = None
