# SPDX-License-Identifier: Apache-2.0
"""Placement: which node runs which server of a scenario. Its rules (the
entries cover each role's DP x TP exactly, TP never spans nodes, no device is
used twice) and the per-server layout the launch plan derives from it: node,
DP ranks, start rank, devices and whether the server is headless.

Pure: no process, no address. Addresses belong to the engine that runs the
plan (``afd_e2e.engines``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from afd_e2e.define.deployment import STANDBY, role_topology
from afd_e2e.define.scenario import (
    NODE_NAME,
    LoadedScenario,
    PlacementEntry,
    RoleTopology,
    Scenario,
)
from afd_e2e.define.yamlpos import Located

INTERFACE_ENV = {
    "cpu": ("GLOO_SOCKET_IFNAME",),
    "cuda": ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"),
    "npu": ("GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME"),
}
"""The variables naming the network interface of a node, per backend."""


@dataclass(frozen=True)
class ServerSlot:
    """One server process of a role as the placement lays it out."""

    role: str
    index: int
    """Position among the role's servers (the plan's rank)."""
    node: str | None
    """Logical node; None for a one-node scenario."""
    dp_local: int
    dp_start: int
    """The first DP rank this server runs."""
    devices: tuple[int, ...]

    @property
    def headless(self) -> bool:
        """Later servers of a role run only engines and join the first one's
        DP group; the first serves the role's API."""
        return self.index > 0


@dataclass(frozen=True)
class StandbySlot(ServerSlot):
    """A standby FFN server: its own API, whatever its index."""

    @property
    def headless(self) -> bool:
        return False


def _entries(scenario: Scenario, role: str) -> list[PlacementEntry]:
    assert scenario.placement is not None
    if role == "ffn":
        return scenario.placement.ffn
    return scenario.placement.attention


def standby_nodes(scenario: Scenario) -> list[str | None]:
    """The node of each standby FFN server: its ``placement.standby`` entry,
    else the first FFN server's node (None for a one-node scenario)."""
    if scenario.placement is None:
        return [None] * scenario.standbys
    placed = [entry.node for entry in scenario.placement.standby]
    default = scenario.placement.ffn[0].node if scenario.placement.ffn else None
    return [placed[i] if i < len(placed) else default for i in range(scenario.standbys)]


def slots(scenario: Scenario, role: str, topo: RoleTopology) -> list[ServerSlot]:
    """The servers of ``role`` (``baseline`` runs on the first attention node;
    each ``standby`` is a server of its own, one rank, never headless)."""
    if role == STANDBY:
        return [
            StandbySlot(role, index, node, 1, 0, ())
            for index, node in enumerate(standby_nodes(scenario))
        ]
    if scenario.placement is None:
        return [ServerSlot(role, 0, None, topo.dp, 0, tuple(topo.devices))]
    if role == "baseline":
        first = scenario.placement.attention[0]
        return [ServerSlot(role, 0, first.node, topo.dp, 0, tuple(first.devices))]
    out, start = [], 0
    for index, entry in enumerate(_entries(scenario, role)):
        devices = tuple(entry.devices)
        out.append(ServerSlot(role, index, entry.node, entry.dp_local, start, devices))
        start += entry.dp_local
    return out


def node_env(scenario: Scenario, node: str | None) -> dict[str, str]:
    """The node's environment: its network interface, where one is named."""
    if scenario.placement is None or node is None:
        return {}
    spec = scenario.placement.nodes.get(node)
    if spec is None or spec.interface is None:
        return {}
    return {name: spec.interface for name in INTERFACE_ENV[scenario.backend]}


def rendezvous_role(scenario: Scenario) -> str:
    """Whose first server hosts the AFD rendezvous: FFN rank 0's, or with
    standbys attention rank 0's (a standby must outlive any FFN rank)."""
    return "attention" if scenario.standbys else "ffn"


def rendezvous_node(scenario: Scenario) -> str | None:
    """The node of the rendezvous host's server (:func:`rendezvous_role`):
    the AFD ``host``."""
    if scenario.placement is None:
        return None
    entries = _entries(scenario, rendezvous_role(scenario))
    return entries[0].node if entries else None


def _standby_errors(loaded: LoadedScenario, s: Scenario) -> list[Located]:
    """``placement.standby``: one entry per standby, each on a known node."""
    assert s.placement is not None
    entries = s.placement.standby
    out = []
    if entries and len(entries) != s.standbys:
        out.append(
            loaded.error(
                ("placement", "standby"),
                f"lists {len(entries)} standby server(s), but "
                f"topology.ffn.standby is {s.standbys}; list one entry per "
                "standby (or none: all on the first FFN server's node)",
            )
        )
    for index, entry in enumerate(entries):
        unknown = _unknown_node(loaded, s, ("placement", "standby", index), entry)
        if unknown is not None:
            out.append(unknown)
    return out


def _unknown_node(
    loaded: LoadedScenario, s: Scenario, here: tuple, entry: PlacementEntry
) -> Located | None:
    """The error of a placement entry on a node ``placement.nodes`` lacks."""
    assert s.placement is not None
    if entry.node in s.placement.nodes:
        return None
    known = ", ".join(sorted(s.placement.nodes)) or "(none)"
    return loaded.error(
        (*here, "node"),
        f"no node named {entry.node!r} under placement.nodes; known: {known}",
    )


def placement_errors(loaded: LoadedScenario, s: Scenario) -> list[Located]:
    """Every placement rule ``s`` breaks, positioned at the field to edit."""
    if s.placement is None:
        return []
    p = s.placement
    out: list[Located] = []
    for name in p.nodes:
        if not re.match(NODE_NAME, name):
            out.append(
                loaded.error(
                    ("placement", "nodes", name),
                    f"node name {name!r} must be a DNS label: lower-case letters, "
                    "digits and '-', at most 32 characters, starting and ending "
                    "with a letter or digit (addresses are resolved at run time)",
                )
            )
    roles = ["attention"] + (["ffn"] if s.afd and s.topology.ffn else [])
    if not (s.afd and s.topology.ffn) and p.ffn:
        out.append(
            loaded.error(
                ("placement", "ffn"), "a colocated scenario places no ffn servers"
            )
        )
    if s.afd and s.topology.ffn and not p.ffn:
        out.append(
            loaded.error(
                ("placement", "ffn"),
                "an AFD scenario with a placement places its ffn servers too",
            )
        )
    out += _standby_errors(loaded, s)
    used_nodes: set[str] = {e.node for e in p.standby}
    devices_on: dict[str, dict[int, tuple[str, int]]] = {}
    for role in roles:
        topo = role_topology(s, role)
        entries = _entries(s, role)
        if topo.devices:
            out.append(
                loaded.error(
                    ("topology", role, "devices"),
                    "with a placement, devices are listed per server under "
                    f"placement.{role}; remove this list",
                )
            )
        covered = sum(e.dp_local for e in entries)
        if entries and covered != topo.dp:
            out.append(
                loaded.error(
                    ("placement", role),
                    f"the {role} servers run {covered} DP ranks in all "
                    f"(sum of dp_local), but topology.{role}.dp is {topo.dp}",
                )
            )
        for index, entry in enumerate(entries):
            here = ("placement", role, index)
            unknown = _unknown_node(loaded, s, here, entry)
            if unknown is not None:
                out.append(unknown)
                continue
            used_nodes.add(entry.node)
            want = entry.dp_local * topo.tp
            if s.backend == "cpu" and entry.devices:
                out.append(
                    loaded.error(
                        (*here, "devices"),
                        "cpu scenarios use no devices; remove the list",
                    )
                )
            elif s.backend != "cpu" and len(entry.devices) != want:
                out.append(
                    loaded.error(
                        (*here, "devices"),
                        f"needs dp_local x tp = {entry.dp_local} x {topo.tp} = "
                        f"{want} devices of node {entry.node!r} (a TP group never "
                        f"spans nodes), got {len(entry.devices)}",
                    )
                )
            taken = devices_on.setdefault(entry.node, {})
            for device in entry.devices:
                if device in taken:
                    other_role, other_index = taken[device]
                    out.append(
                        loaded.error(
                            (*here, "devices"),
                            f"device {device} of node {entry.node!r} is already "
                            f"used by placement.{other_role}[{other_index}]",
                        )
                    )
                else:
                    taken[device] = (role, index)
    for name in p.nodes:
        if name not in used_nodes and re.match(NODE_NAME, name):
            out.append(
                loaded.error(
                    ("placement", "nodes", name),
                    f"node {name!r} runs no server; remove it or place one there",
                )
            )
    return out
