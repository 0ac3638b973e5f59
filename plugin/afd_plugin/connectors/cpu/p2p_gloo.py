# SPDX-License-Identifier: Apache-2.0
"""``P2pGlooAFDConnector``: hidden states over gloo point-to-point, with the
gloo control plane it owns. Runs on any CPU; the CI backend of AFD.

The design is the shared one of ``connectors/p2p_base.py``; only the data
transport (gloo on CPU tensors) is chosen here.
"""

from __future__ import annotations

from afd_plugin.connectors.cpu.schema import P2pGlooExtraConfig
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.p2p_base import (
    DataTransport,
    GlooTransport,
    P2pAFDConnectorBase,
)


class P2pGlooAFDConnector(P2pAFDConnectorBase):
    """One attention rank <-> its FFN rank over gloo; an FFN rank serves a block."""

    extra: P2pGlooExtraConfig

    def _open_transport(self, world: GlooWorld) -> DataTransport:
        return GlooTransport(world)
