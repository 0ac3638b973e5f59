# SPDX-License-Identifier: Apache-2.0
"""The interface every engine gives the runner: where the nodes are, and a set
of running servers that can be probed, checked and torn down.

A teardown record is the engine's account of what it signalled; the runner
fails the run on any forced SIGKILL or leftover (AFD-I12), whatever the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from afd_e2e.define.scenario import Scenario
from afd_e2e.launch.plan import LaunchPlan, NodeAddresses, RoleLaunch
from afd_e2e.processes.readiness import Probe, attention_api_probe, health_probe
from afd_e2e.processes.teardown_record import TeardownRecord


class EngineError(RuntimeError):
    """The engine cannot run the plan (no cluster, no namespaces, a missing
    node); nothing was started. The message says why and what to do."""


class Servers(Protocol):
    """A plan's servers as an engine runs them."""

    def start_server(self, launch: RoleLaunch) -> None:
        """Start one server of the plan; returns at once."""

    def wait_ready(
        self, probes: Mapping[str, Probe | None], timeout_s: float
    ) -> dict[str, float]:
        """Poll until every started server is ready; ``role:rank`` -> seconds.
        Raises ``RoleError`` when one dies or the deadline passes."""

    def check_alive(self, during: str = "the run") -> None:
        """Raise ``ProcessDiedError`` for a server that exited."""

    def commands(self) -> dict[str, dict[str, Any]]:
        """Per ``role:rank``: argv, extra env, log, pid (and node)."""

    def kill_process(self, name: str) -> object:
        """SIGKILL one server's processes now, as a fault a check injects:
        recorded under the teardown record's ``injected`` (allowed), no
        longer checked by :meth:`check_alive`."""

    def expect_exit(self, name: str) -> None:
        """That server may exit from now on (an injected fault's
        consequence): :meth:`check_alive` no longer checks it."""

    def stop(self) -> TeardownRecord:
        """SIGTERM, grace, SIGKILL; never raises for process trouble."""


class Engine(Protocol):
    """Resolves the placement's nodes and runs servers on them."""

    name: str

    def node_addresses(
        self, scenario: Scenario, *, dry_run: bool = False
    ) -> NodeAddresses:
        """The address of each logical node (raises ``EngineError``); with
        ``dry_run`` nothing is set up to find them."""

    def servers(
        self, plan: LaunchPlan, scenario: Scenario, *, stream_logs: bool
    ) -> Servers:
        """An empty set of servers for ``plan``; with ``stream_logs`` each
        server's output is printed too (where the engine can), not only
        written to its log file."""

    def close(self) -> None:
        """Release what the engine set up (namespaces, cluster connection)."""


def server_probe(plan: LaunchPlan, launch: RoleLaunch) -> Probe:
    """When one server counts as ready: the API role answers a completion, an
    FFN server (a standby too) its ``/health``, and a headless server follows its role's
    first server (it serves nothing; that one is ready once all DP ranks
    joined)."""
    if launch.headless:
        leader = next(r for r in plan.roles if r.role == launch.role and not r.headless)
        return health_probe(leader.base_url)
    if launch.role in ("ffn", "standby"):  # a standby answers once it waits
        return health_probe(launch.base_url)
    return attention_api_probe(launch.base_url, plan.served_name)
