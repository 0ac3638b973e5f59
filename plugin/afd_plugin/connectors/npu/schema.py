# SPDX-License-Identifier: Apache-2.0
"""Closed ``connector_extra_config`` schemas of the Ascend NPU (CAM) connectors.

Torch-free: the config layer, the harness and NPU feature checks use them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from afd_plugin.connectors.extra_config import ExtraConfigSchema


class CAMP2pExtraConfig(ExtraConfigSchema):
    """Settings of ``CAMP2pAFDConnector``."""

    ops: Literal["ascend", "reference"] = "ascend"
    """Which implementation of the CAM P2P ops runs: `ascend` (the native NPU
    kernels of `afd_plugin._C_ascend`) or `reference` (CPU kernels of the same
    contract over shared memory or gloo; CPU platform only, never a fallback)."""

    compute_gate_on_attention: bool = False
    """Operator contract of the CAM P2P ops; must be false (AFD-I7)."""

    core_num: int = Field(default=8, ge=1)
    """Vector cores each op call uses, where the role's own field is unset."""

    attn_core_num: int | None = Field(default=None, ge=1)
    """Vector cores of the ops on attention ranks (default `core_num`)."""

    ffn_core_num: int | None = Field(default=None, ge=1)
    """Vector cores of the ops on FFN ranks (default `core_num`)."""

    quant_mode: Literal[0] = 0
    """Activation quantisation of the exchange; the ops support 0 (bf16) only."""

    max_num_tokens_per_rank: int = Field(default=256, ge=1)
    """Largest token count one attention rank sends in one stage (the size of
    its window at the FFN rank)."""

    rendezvous_timeout_s: float = Field(default=600.0, gt=0)
    """How long a role waits for its peers at rendezvous before failing."""

    peer_timeout_s: float = Field(default=60.0, gt=0)
    """How long one reference op call may wait for the peer before failing."""

    transport: Literal["auto", "gloo", "shm"] = "auto"
    """Data path of the reference ops, as `P2pGlooAFDConnector`'s `transport`."""

    def aiv_num(self, role: str) -> int:
        own = self.attn_core_num if role == "attention" else self.ffn_core_num
        return own if own is not None else self.core_num


class CAMAsyncExtraConfig(ExtraConfigSchema):
    """Settings of ``CAMAsyncAFDConnector``."""

    ops: Literal["ascend", "reference"] = "ascend"
    """Which implementation of the CAM async dispatch/combine ops runs: `ascend`
    (the vendor's CAM operator library) or `reference` (CPU kernels of the same
    contract over shared memory or gloo; CPU platform only, never a fallback)."""

    dynamicQuant: Literal[0, 1] = 0  # noqa: N815 - the operator library's name
    """Dispatched activations: 0 as they are, 1 int8 with one scale per token."""

    attn_ranks_per_dp: int = Field(default=1, ge=1)
    """Attention ranks of one DP replica (its TP size): each of them dispatches
    its copy of the replica's tokens."""

    async_moe_ubatching: bool = False
    """Split each MoE call into `async_moe_num_ubatches` dispatches, all sent
    before the first combine (needs the gate on attention)."""

    async_moe_num_ubatches: Literal[2] = 2
    """Dispatches per MoE call with `async_moe_ubatching`."""

    async_moe_split: Literal["request"] = "request"
    """Where `async_moe_ubatching` splits the tokens: at the request boundary
    nearest the middle (MoE is per token, so any boundary gives the same
    output; one at a request keeps a request's tokens together)."""

    max_num_tokens_per_rank: int = Field(default=4096, ge=1)
    """Capacity of one dispatch: the most tokens one attention rank sends in
    one MoE call (at least vLLM's `max_num_batched_tokens`, equal on every
    role)."""

    rendezvous_timeout_s: float = Field(default=600.0, gt=0)
    """How long a role waits for its peers at rendezvous before failing."""

    peer_timeout_s: float = Field(default=60.0, gt=0)
    """How long one op call may wait for its peer before failing."""

    transport: Literal["auto", "gloo", "shm"] = "auto"
    """Data path of the reference ops, as `P2pGlooAFDConnector`'s `transport`."""
