# SPDX-License-Identifier: Apache-2.0
"""Closed ``connector_extra_config`` schema of the CUDA (NCCL) connector.

Torch-free: the config layer and the harness validate with it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from afd_plugin.connectors.extra_config import ExtraConfigSchema


class P2pNcclExtraConfig(ExtraConfigSchema):
    """Settings of ``P2pNcclAFDConnector``."""

    rendezvous_timeout_s: float = Field(default=600.0, gt=0)
    """How long a role waits for its peers at rendezvous before failing."""

    peer_timeout_s: float = Field(default=300.0, gt=0)
    """How long one control-plane (or host-transport) operation may wait."""

    transport: Literal["nccl", "host"] = "nccl"
    """Data path: `nccl` (one communicator over the AFD world; its sends and
    receives run on the current stream, so the attention side's graphs capture
    them), or `host` (through host memory over the gloo world; for roles that
    share one GPU, where NCCL refuses two ranks; never captured, eager only)."""

    def graph_refusal(self) -> tuple[str, str] | None:
        if self.transport == "host":
            why = (
                "transport 'host' stages through host memory over gloo and is "
                "never captured into a graph; use transport 'nccl'"
            )
            return ("transport", why)
        return None
