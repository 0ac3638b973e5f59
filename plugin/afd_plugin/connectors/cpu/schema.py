# SPDX-License-Identifier: Apache-2.0
"""Closed ``connector_extra_config`` schema of the CPU (gloo) connector.

Torch-free: the config layer and the harness validate with it.
"""

from __future__ import annotations

from pydantic import Field

from afd_plugin.connectors.extra_config import ExtraConfigSchema


class P2pGlooExtraConfig(ExtraConfigSchema):
    """Settings of ``P2pGlooAFDConnector``."""

    rendezvous_timeout_s: float = Field(default=300.0, gt=0)
    """How long a role waits for its peers at rendezvous before failing."""

    peer_timeout_s: float = Field(default=60.0, gt=0)
    """How long one send or receive may wait for the peer before failing."""
