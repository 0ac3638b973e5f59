"""``P2pGlooAFDConnector``: hidden states over gloo point-to-point, with the
gloo control plane it owns. Runs on any CPU; the CI backend of AFD.

The design is the shared one of ``connectors/p2p_base.py``; only the data
transport (gloo on CPU tensors) is chosen here.
"""

from __future__ import annotations

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.cpu.schema import P2pGlooExtraConfig
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.p2p_base import (
    TAG_CONTROL_BYTES,
    TAG_CONTROL_LENGTH,
    TAG_FFN_OUTPUT,
    TAG_HIDDEN,
    TAG_ROUTER_LOGITS,
    DataTransport,
    GlooTransport,
    P2pAFDConnectorBase,
    P2pControlPlane,
    StepState,
)

__all__ = [
    "TAG_CONTROL_BYTES",
    "TAG_CONTROL_LENGTH",
    "TAG_FFN_OUTPUT",
    "TAG_HIDDEN",
    "TAG_ROUTER_LOGITS",
    "GlooControlPlane",
    "P2pGlooAFDConnector",
    "StepState",
]

GlooControlPlane = P2pControlPlane


class P2pGlooAFDConnector(P2pAFDConnectorBase):
    """One attention rank <-> its FFN rank over gloo; an FFN rank serves a block."""

    def __init__(self, config: AFDConfig, rank: int, extra: P2pGlooExtraConfig):
        super().__init__(config, rank, extra)

    def _open_transport(self, world: GlooWorld) -> DataTransport:
        return GlooTransport(world)
