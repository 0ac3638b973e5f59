# SPDX-License-Identifier: Apache-2.0
"""Closed ``connector_extra_config`` schema of the CPU (gloo) connector.

Torch-free: the config layer and the harness validate with it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from afd_plugin.connectors.extra_config import ExtraConfigSchema


class P2pGlooExtraConfig(ExtraConfigSchema):
    """Settings of ``P2pGlooAFDConnector``."""

    rendezvous_timeout_s: float = Field(default=300.0, gt=0)
    """How long a role waits for its peers at rendezvous before failing."""

    peer_timeout_s: float = Field(default=60.0, gt=0)
    """How long one send or receive may wait for the peer before failing."""

    transport: Literal["auto", "gloo", "shm"] = "auto"
    """Data path: `shm` (shared-memory rings, for roles on one machine; x86-64
    Linux), `gloo` (TCP, anywhere), or `auto` (`shm` when the whole block, an
    FFN rank and the attention ranks it serves, runs on this machine, else
    `gloo`). The control plane always runs over gloo."""

    shm_ring_bytes: int = Field(default=8 << 20, ge=4096)
    """Capacity of each shared-memory ring (one per peer and direction); a
    larger message streams through it."""

    shm_spin_us: float = Field(default=500.0, ge=0)
    """How long a shared-memory wait spins before it sleeps on the doorbell. A
    layer's answer usually comes within it, so neither role pays a wake-up
    (measured on two cores, Qwen3-MoE tiny: 4.0 -> 3.3 ms per step at batch 1
    against 50 us)."""
