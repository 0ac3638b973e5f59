# SPDX-License-Identifier: Apache-2.0
"""The per-step AFD metadata, kept only at
``forward_context.additional_kwargs['afd_metadata']`` (AFD-I9).

The attention runner of every platform writes this one key and the role
models read it; it sits beside the models so that imports point down
(runtime -> models). Not a stable API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm.forward_context import get_forward_context, is_forward_context_available

if TYPE_CHECKING:
    from afd_plugin.connectors.base import AFDConnector
    from afd_plugin.wire import AFDControlPayload

METADATA_KEY = "afd_metadata"


@dataclass(frozen=True)
class AFDForwardMetadata:
    """What the role models need during one forward: the live connector, the
    micro-batch stage and the step's control payload."""

    connector: AFDConnector
    stage: int
    payload: AFDControlPayload

    @property
    def num_tokens(self) -> int:
        return self.payload.total_tokens


def install_metadata(metadata: AFDForwardMetadata) -> None:
    """Put ``metadata`` in the current forward context (must be set)."""
    get_forward_context().additional_kwargs[METADATA_KEY] = metadata


def current_metadata() -> AFDForwardMetadata:
    """The step's metadata; a role model calling this outside an AFD step is a
    runner bug, reported as such."""
    if not is_forward_context_available():
        raise RuntimeError(
            "AFD model code ran outside a vLLM forward context; the role runner "
            "must run it inside set_forward_context()"
        )
    metadata = get_forward_context().additional_kwargs.get(METADATA_KEY)
    if metadata is None:
        raise RuntimeError(
            "forward_context.additional_kwargs['afd_metadata'] is missing: the "
            "AFD role runner did not install this step's metadata"
        )
    return metadata
