# SPDX-License-Identifier: Apache-2.0
"""The CAM async operator contract: the one object behind which every op call
and communicator of ``CAMAsyncAFDConnector`` sits, the routing arithmetic both
sides of it share, and the loader of the vendor's library.

Contract (attention ranks first: attention a is world rank a, FFN j is
``A + j``; FFN j owns experts ``expert_block(j, E, F)``):

- ``dispatch_send`` (attention) sends one FFN rank the token rows it needs for
  one (layer, stage) with their top-k expert ids (the weights stay on the
  attention side), its layer index, stage and source; every FFN rank gets a
  dispatch, an empty one too, so every rank answers.
- ``dispatch_recv`` (FFN) returns the next dispatch from any source, in arrival
  order, with the routed rows sorted by owned expert and a count per expert.
- ``combine_send`` (FFN) answers the source: the dense or shared output of its
  tokens (home rank only) and one unweighted output row per routed row; an
  answer with no rows carries a one-row placeholder.
- ``combine_recv`` (attention) returns both parts; the caller applies the
  top-k weights.

Capacity: one dispatch carries at most ``max_num_tokens_per_rank`` tokens, on
both sides; anything more is an error before a byte moves.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod

import torch

from afd_plugin.connectors.base import DispatchWork
from afd_plugin.connectors.npu.cam_p2p_ops import CamOpsUnavailable

VENDOR_MODULE = "umdk_cam_op_lib"
"""The vendor's CAM operator library (closed source, shipped with CANN)."""
VENDOR_OPS = (
    "async_dispatch_send",
    "async_dispatch_recv",
    "async_combine_send",
    "async_combine_recv",
)


class CamAsyncOps(ABC):
    """The op backend of one ``CAMAsyncAFDConnector`` (one per process)."""

    @abstractmethod
    def dispatch_send(
        self,
        ffn_rank: int,
        layer: int,
        stage: int,
        hidden: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> None:
        """Attention: send ``hidden`` (T, H) and ``topk_ids`` (T, k; k = 0 on a
        dense layer) to ``ffn_rank``; returns without waiting for the answer."""

    @abstractmethod
    def dispatch_recv(self) -> DispatchWork:
        """FFN: the next dispatch from any attention rank (waits while idle)."""

    @abstractmethod
    def combine_send(
        self, work: DispatchWork, local: torch.Tensor | None, routed: torch.Tensor
    ) -> None:
        """FFN: answer ``work.source``."""

    @abstractmethod
    def combine_recv(
        self, ffn_rank: int, layer: int, stage: int
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Attention: ``(local, routed)`` of the dispatch to ``ffn_rank`` for
        (``layer``, ``stage``); dispatches and answers pair in order."""

    def peers_left(self) -> bool:
        """FFN: whether every attention rank closed in order."""
        return False

    @abstractmethod
    def close(self) -> None:
        """Release communicators and threads; idempotent."""


# -- routing arithmetic, the same on both sides ---------------------------


def routed_order(
    topk_ids: torch.Tensor, experts: range
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The (token, slot) pairs of ``topk_ids`` (T, k) routed to ``experts``,
    sorted by expert (ties in token, then slot order): ``(tokens, slots,
    expert_ids)``, each (N,) int64."""
    k = topk_ids.shape[1] if topk_ids.dim() == 2 else 0
    if k == 0 or topk_ids.shape[0] == 0 or len(experts) == 0:
        empty = torch.empty(0, dtype=torch.int64)
        return empty, empty, empty
    flat = topk_ids.reshape(-1).to(torch.int64)
    positions = torch.nonzero((flat >= experts.start) & (flat < experts.stop)).flatten()
    ids = flat[positions]
    order = torch.sort(ids, stable=True).indices
    positions, ids = positions[order], ids[order]
    return positions // k, positions % k, ids


def dispatched_tokens(
    topk_ids: torch.Tensor, experts: range, home: bool
) -> torch.Tensor:
    """Indices of the tokens one FFN rank needs: every token at the home rank
    (dense and shared parts), else those routed to one of its experts."""
    count = topk_ids.shape[0]
    if home:
        return torch.arange(count, dtype=torch.int64)
    if topk_ids.dim() != 2 or topk_ids.shape[1] == 0 or len(experts) == 0:
        return torch.empty(0, dtype=torch.int64)
    ids = topk_ids.to(torch.int64)
    mine = ((ids >= experts.start) & (ids < experts.stop)).any(dim=1)
    return torch.nonzero(mine).flatten()


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``dynamicQuant: 1``: int8 rows with one float32 scale per token."""
    scales = x.float().abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(x.float() / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


def dequantize_per_token(
    q: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    return (q.float() * scales[:, None]).to(dtype)


# -- the vendor library ----------------------------------------------------


def ensure_cam_async_ops_available() -> None:
    """Load the CAM async ops for ``ops: ascend``; called from
    ``init_afd_connector()`` only. Raises ``CamOpsUnavailable`` saying what
    to install, never a bare ``ModuleNotFoundError``."""
    missing: list[str] = []
    try:
        importlib.import_module("torch_npu")
    except ImportError as exc:
        missing.append(f"torch_npu (Ascend PyTorch adapter: {exc})")
    try:
        library = importlib.import_module(VENDOR_MODULE)
    except ImportError as exc:
        missing.append(
            f"{VENDOR_MODULE} (the CAM operator library shipped by the vendor "
            f"with CANN: {exc})"
        )
    else:
        absent = [op for op in VENDOR_OPS if not hasattr(library, op)]
        if absent:
            missing.append(f"{VENDOR_MODULE} without {', '.join(absent)}")
    if missing:
        raise CamOpsUnavailable(
            "CAMAsyncAFDConnector with connector_extra_config.ops 'ascend' needs "
            + "; ".join(missing)
            + ". Install them in the Ascend (CANN) environment, or on the CPU "
            "platform set ops: 'reference' (the CPU kernels of the same contract)"
        )
