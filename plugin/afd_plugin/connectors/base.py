# SPDX-License-Identifier: Apache-2.0
"""The contracts every connector and control plane implements, and the
exchange spec both roles agree on at rendezvous (AFD-I2, I3, I10).

No torch at import: tensors appear only in annotations.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from afd_plugin.config import AFDConfig
    from afd_plugin.wire import AFDControlPayload


class AFDPeerError(RuntimeError):
    """A peer failed, left or never arrived; the message names it."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        """The peer stayed silent past ``peer_timeout_s`` (it may be alive)."""


@dataclass(frozen=True)
class LayerExchange:
    """What one decoder layer sends per token besides its hidden state."""

    layer: int
    kind: str = "moe"
    """``moe`` or ``dense``: which FFN block the layer has."""
    router_logits: int = 0
    """Router logits per token sent with the hidden state (gate on attention);
    0 when the gate runs on the FFN side or the layer is dense."""


@dataclass(frozen=True)
class ExchangeSpec:
    """Shapes and dtypes of one deployment's exchange; both roles build it from
    their model and must agree exactly (checked at rendezvous)."""

    hidden_size: int
    dtype: str
    """Activation dtype name (``torch.<name>``), e.g. ``bfloat16``."""
    router_dtype: str
    layers: tuple[LayerExchange, ...]
    stages: int = 1
    """Micro-batch stages per step: 2 with DBO (``--enable-dbo``), else 1.
    Every step sends this many control payloads, so both roles must agree."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @cached_property
    def by_layer(self) -> dict[int, LayerExchange]:
        """The layers by index: looked up per layer and step on the data path."""
        return {x.layer: x for x in self.layers}

    def layer(self, index: int) -> LayerExchange:
        try:
            return self.by_layer[index]
        except KeyError:
            raise KeyError(f"layer {index} is not part of the AFD exchange") from None

    def differences(self, other: ExchangeSpec) -> list[str]:
        """Human-readable differences, empty when both sides agree."""
        out = [
            f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}"
            for name in ("hidden_size", "dtype", "router_dtype", "stages")
            if getattr(self, name) != getattr(other, name)
        ]
        mine, theirs = self.by_layer, other.by_layer
        if set(mine) != set(theirs):
            out.append(f"layers: {sorted(mine)} != {sorted(theirs)}")
        for index in sorted(set(mine) & set(theirs)):
            if mine[index] != theirs[index]:
                out.append(f"layer {index}: {mine[index]} != {theirs[index]}")
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ExchangeSpec:
        return cls(
            hidden_size=raw["hidden_size"],
            dtype=raw["dtype"],
            router_dtype=raw["router_dtype"],
            layers=tuple(LayerExchange(**x) for x in raw["layers"]),
            stages=raw.get("stages", 1),
        )


@dataclass
class DispatchWork:
    """One dispatch an FFN rank received without a control plane (AFD-I2):
    everything it needs travels with the data. The connector fills it; the
    FFN model computes; ``send_combine`` answers its source."""

    layer: int
    """The decoder layer, from the payload (not from a loop counter)."""
    stage: int
    """The dispatch's micro-batch stage inside its MoE call."""
    source: int
    """The attention rank that sent it (and gets the answer)."""
    hidden: torch.Tensor
    """(T, H) token rows the source sent here, dequantised."""
    home: bool
    """Whether this rank runs the source's dense layer or shared experts (on
    ``hidden``); every rank runs the routed experts it owns."""
    routed: torch.Tensor
    """(N, H) rows, one per (token, top-k slot) routed to an expert this rank
    owns, sorted by expert."""
    routed_experts: torch.Tensor
    """(N,) the global expert id of each routed row (non-decreasing)."""
    expert_counts: torch.Tensor
    """Rows per owned expert, in expert order (sums to N)."""


class AFDControlPlane(ABC):
    """Owned by its connector; carries one payload per step, before the data.

    It has no lifecycle of its own: the connector's ``close()`` ends it.
    """

    @abstractmethod
    def send_dp_metadata_list(self, payload: AFDControlPayload) -> None:
        """Attention side: update local state from ``payload``, then send it."""

    @abstractmethod
    def recv_dp_metadata_list(self) -> AFDControlPayload:
        """FFN side: receive the next step's payload (waits while idle)."""


class AFDConnector(ABC):
    """Moves hidden states between one attention rank and its FFN rank.

    Construction is light (parse config only); ``bind()`` records the exchange
    spec of the loaded model (light too); ``init_afd_connector()`` does the
    cross-role rendezvous after weights load; ``close()`` is safe at any point,
    twice, and ``init_afd_connector()`` may run again after it.
    """

    control_plane: AFDControlPlane | None = None

    def __init__(self, config: AFDConfig, rank: int) -> None:
        self.config = config
        self.rank = rank
        self.extra: Any = config.extra
        """``connector_extra_config`` as parsed once, with the config."""
        self.spec: ExchangeSpec | None = None

    def bind(self, spec: ExchangeSpec) -> None:
        """Record what this role's model exchanges; called before init."""
        self.spec = spec

    @abstractmethod
    def init_afd_connector(self) -> None:
        """Rendezvous with the peers and build groups; fail with the peer named."""

    @abstractmethod
    def update_state_from_dp_metadata(self, payload: AFDControlPayload) -> None:
        """Size per-stage buffers for the step ``payload`` describes."""

    @abstractmethod
    def send_attn_output(
        self, hidden: torch.Tensor, layer: int, stage: int, **extras: torch.Tensor
    ) -> None:
        """Attention side: send one layer's FFN input (and router logits)."""

    @abstractmethod
    def recv_ffn_output(self, layer: int, stage: int) -> torch.Tensor:
        """Attention side: the FFN output for what ``send_attn_output`` sent."""

    @abstractmethod
    def recv_attn_output(
        self, layer: int, stage: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """FFN side: the concatenated inputs of every attention rank served."""

    @abstractmethod
    def send_ffn_output(self, hidden: torch.Tensor, layer: int, stage: int) -> None:
        """FFN side: split ``hidden`` by rank and send each part back."""

    @abstractmethod
    def close(self) -> None:
        """Release groups and buffers; idempotent, safe on a half-built connector."""

    @property
    def block(self) -> range:
        """Attention ranks whose token counts this rank's step payloads carry,
        in payload order (a control-plane connector: its FFN rank's group)."""
        return range(self.rank, self.rank + 1)

    @property
    def buffered_sends(self) -> bool:
        """Whether a send returns before the peer receives it (one message per
        micro-batch stage fits in flight). The FFN side then serves each
        micro-batch as it arrives (``runtime/ffn_schedule.py``, pipelined);
        else it mirrors the attention side's order."""
        return False

    # -- the connector-driven path (control_plane is None, AFD-I2) ----------

    @property
    def dispatches_topk(self) -> bool:
        """Attention side: whether ``send_attn_output`` takes the routing
        (``topk_ids`` and ``topk_weights`` extras, the gate on attention)
        instead of router logits; the weights then stay here for the combine."""
        return False

    def note_step_requests(self, request_starts: tuple[int, ...]) -> None:  # noqa: B027
        """Attention side, at each step's start: the token offset of each of
        its requests (for a connector that splits a call at a request
        boundary); ignored by default."""

    def recv_dispatch(self) -> DispatchWork:
        """FFN side without a control plane: the next dispatch from any
        attention rank, in arrival order (waits while idle)."""
        raise NotImplementedError(
            f"{type(self).__name__} is driven by its control plane"
        )

    def send_combine(
        self, work: DispatchWork, local: torch.Tensor | None, routed: torch.Tensor
    ) -> None:
        """FFN side without a control plane: answer ``work``'s source with the
        dense or shared output of its tokens (``local``, home rank only) and the
        routed rows' expert outputs, unweighted, in ``work.routed`` order."""
        raise NotImplementedError(
            f"{type(self).__name__} is driven by its control plane"
        )

    def wait_until_active(self, stopping: Callable[[], bool]) -> bool:
        """FFN side, before the daemon serves: a standby FFN server waits here
        until it is promoted in place of a dead rank (False: it stopped
        first); every other rank is active at once."""
        return True

    @property
    def waiting_standby(self) -> bool:
        """A standby FFN server that was not promoted (yet)."""
        return False

    def takes_part(self, layer: int, stage: int) -> bool:
        """FFN side: whether ``layer`` of ``stage`` moves in the current step
        (a standby's first step resumes mid-way: the layers before are done)."""
        return True

    def peers_left(self) -> bool:
        """FFN side: whether every served attention rank closed in order (a
        lost connection is then a shutdown, not a failure)."""
        return False
