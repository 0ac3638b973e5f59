"""The contracts every connector and control plane implements.

No torch at import: tensors appear only in annotations (AFD-I2, I3, I10).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from afd_plugin.config import AFDConfig
    from afd_plugin.wire import AFDControlPayload


class AFDControlPlane(ABC):
    """Owned by its connector; carries one payload per step, before the data.

    It has no lifecycle of its own: the connector's ``close()`` ends it.
    """

    @abstractmethod
    def send_dp_metadata_list(self, payload: AFDControlPayload) -> None:
        """Attention side: update local state from ``payload``, then send it."""

    @abstractmethod
    def recv_dp_metadata_list(self) -> AFDControlPayload:
        """FFN side: receive the next step's payload."""


class AFDConnector(ABC):
    """Moves hidden states between one attention rank and its FFN rank.

    Construction is light (parse config only); ``init_afd_connector()`` does
    the cross-role rendezvous after weights load; ``close()`` is safe at any
    point and twice.
    """

    control_plane: AFDControlPlane | None = None

    def __init__(self, config: AFDConfig, rank: int, extra: Any) -> None:
        self.config = config
        self.rank = rank
        self.extra = extra

    @abstractmethod
    def init_afd_connector(self) -> None:
        """Rendezvous with the peers and build groups; fail with the peer named."""

    @abstractmethod
    def update_state_from_dp_metadata(self, payload: AFDControlPayload) -> None:
        """Size per-stage buffers for the step ``payload`` describes."""

    @abstractmethod
    def send_attn_output(
        self, hidden: torch.Tensor, layer: int, stage: int, **extras: torch.Tensor
    ) -> None: ...

    @abstractmethod
    def recv_ffn_output(self, layer: int, stage: int) -> torch.Tensor: ...

    @abstractmethod
    def recv_attn_output(
        self, layer: int, stage: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...

    @abstractmethod
    def send_ffn_output(self, hidden: torch.Tensor, layer: int, stage: int) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Release groups and buffers; idempotent, safe on a half-built connector."""
