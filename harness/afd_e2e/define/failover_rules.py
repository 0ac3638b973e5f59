# SPDX-License-Identifier: Apache-2.0
"""Scenario rules of standby FFN servers and the ``ffn_failover`` check: which
connector fails over, and how many standbys a check's kills need."""

from __future__ import annotations

from afd_e2e.define.scenario import LoadedScenario, Scenario
from afd_e2e.define.yamlpos import Located

FAILOVER_CONNECTORS = ("P2pGlooAFDConnector",)
"""The connectors whose attention ranks promote a standby FFN server."""


def standby_errors(loaded: LoadedScenario, s: Scenario) -> list[Located]:
    """Standbys on a connector that cannot fail over."""
    if not s.standbys or s.connector is None:
        return []
    if s.connector.name in FAILOVER_CONNECTORS:
        return []
    allowed = ", ".join(FAILOVER_CONNECTORS)
    return [
        loaded.error(
            ("topology", "ffn", "standby"),
            f"standby FFN servers need a connector that fails over ({allowed}); "
            f"connector is {s.connector.name}, so standby must be 0, got "
            f"{s.standbys}",
        )
    ]


def failover_check_errors(loaded: LoadedScenario, s: Scenario) -> list[Located]:
    """An ``ffn_failover`` check needs an FFN role and one standby per kill
    that must fail over: ``expect: complete`` kills at most ``standby`` times,
    ``expect: fail`` exactly ``standby + 1`` times (the last finds none)."""
    spec = s.checks.ffn_failover
    if spec is None:
        return []
    if not s.afd or s.topology.ffn is None:
        return [
            loaded.error(
                ("checks", "ffn_failover"),
                "a colocated scenario has no FFN server to kill; remove the check",
            )
        ]
    standby = s.standbys
    if spec.expect == "complete" and spec.kills > standby:
        allowed = f"1..{standby}" if standby else "none (no standby)"
        return [
            loaded.error(
                ("checks", "ffn_failover", "kills"),
                f"{spec.kills} kill(s) that must fail over need as many standbys, "
                f"but topology.ffn.standby is {standby}; allowed kills: "
                f"{allowed}, or expect: fail with kills: {standby + 1} (the last "
                "kill finds no standby)",
            )
        ]
    if spec.expect == "fail" and spec.kills != standby + 1:
        return [
            loaded.error(
                ("checks", "ffn_failover", "kills"),
                f"expect: fail means the last kill finds no standby: kills must be "
                f"topology.ffn.standby + 1 = {standby + 1}, got {spec.kills}",
            )
        ]
    return []
