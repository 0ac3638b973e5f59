# SPDX-License-Identifier: Apache-2.0
"""``P2pGlooAFDConnector``: hidden states over shared memory (roles on one
machine) or gloo point-to-point, with the gloo control plane it owns. Runs on
any CPU; the CI backend of AFD.

The design is the shared one of ``connectors/p2p_base.py``; only the data
transport is chosen here (``transport`` in its extra config).
"""

from __future__ import annotations

import logging

from afd_plugin.connectors.cpu.schema import P2pGlooExtraConfig
from afd_plugin.connectors.cpu.shm_transport import (
    ShmTransport,
    choose_shm,
    shm_refusal,
)
from afd_plugin.connectors.gloo_world import GlooWorld
from afd_plugin.connectors.p2p_base import (
    DataTransport,
    GlooTransport,
    P2pAFDConnectorBase,
)

logger = logging.getLogger("afd_plugin")


class P2pGlooAFDConnector(P2pAFDConnectorBase):
    """One attention rank <-> its FFN rank over gloo; an FFN rank serves a block."""

    extra: P2pGlooExtraConfig

    def _open_transport(self, world: GlooWorld) -> DataTransport:
        peers = (self.ffn_peer,) if self.is_attention else self.attention_peers
        generation = self.incarnation
        if choose_shm(self.extra, world, self.exchange_group):
            return ShmTransport(
                world,
                peers,
                self.extra,
                is_ffn=not self.is_attention,
                generation=generation,
            )
        why = (
            "transport is 'gloo'"
            if self.extra.transport == "gloo"
            else shm_refusal(world, self.exchange_group)
        )
        if generation:
            # A promoted standby is no member of the world's group: it and its
            # attention ranks connect a group of their own.
            ffn = self.layout.global_rank("ffn", self.block_ffn_rank)
            world.open_group((ffn, *self.attention_peers), generation)
        logger.info("afd-plugin: %s: gloo data path (%s)", world.me(), why)
        return GlooTransport(world)
