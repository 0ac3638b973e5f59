# SPDX-License-Identifier: Apache-2.0
"""Closed ``connector_extra_config`` schemas of the Ascend NPU (CAM) connectors.

Torch-free: the config layer, the harness and NPU feature checks use them.
"""

from __future__ import annotations

from pydantic import Field

from afd_plugin.connectors.extra_config import ExtraConfigSchema


class CAMP2pExtraConfig(ExtraConfigSchema):
    """Settings of ``CAMP2pAFDConnector``."""

    compute_gate_on_attention: bool = False
    """Operator contract of the CAM P2P ops; must be false (AFD-I7)."""

    max_num_tokens_per_rank: int = Field(default=256, ge=1)
    """Largest token count one attention rank sends in one stage."""

    rendezvous_timeout_s: float = Field(default=600.0, gt=0)
    """How long a role waits for its peers at rendezvous before failing."""


class CAMAsyncExtraConfig(ExtraConfigSchema):
    """Settings of ``CAMAsyncAFDConnector``."""

    async_moe_ubatching: bool = False
    """Split each MoE call into two AFD-managed stages (needs the gate on
    attention)."""

    max_num_tokens_per_rank: int = Field(default=4096, ge=1)
    """Largest token count one attention rank sends in one stage."""

    rendezvous_timeout_s: float = Field(default=600.0, gt=0)
    """How long a role waits for its peers at rendezvous before failing."""
