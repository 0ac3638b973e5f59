"""Platform-neutral half of the attention role's model runner: after loading,
the rendezvous; before every forward, the step's control payload and metadata.

Mixed into each platform's runner (``runtime/cpu/model_runners.py`` on CPU).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from vllm.forward_context import get_forward_context

from afd_plugin.runtime.metadata import (
    AFDForwardMetadata,
    has_metadata,
    install_metadata,
)
from afd_plugin.runtime.step_payload import STEP_KINDS, block_token_counts, step_payload
from afd_plugin.topology import attention_block, ffn_rank_for_attention

if TYPE_CHECKING:
    from torch import nn
    from vllm.config import VllmConfig

    from afd_plugin.connectors.base import AFDConnector


class AFDAttentionRunnerMixin:
    """State and hooks the attention runner adds to vLLM's runner."""

    vllm_config: VllmConfig
    afd_connector: AFDConnector
    _afd_step_kind: str = "eager"

    def afd_finish_load(self, model: nn.Module) -> None:
        """Call at the very end of ``load_model`` (AFD-I3): every forward of
        ``model`` (real steps and dummy runs alike) first sends the control
        payload and installs the metadata; then the rendezvous."""
        model.register_forward_pre_hook(self._afd_begin_step, with_kwargs=True)
        self.afd_connector.bind(model.afd_spec)
        self.afd_connector.init_afd_connector()

    @contextmanager
    def afd_step_kind(self, kind: str) -> Iterator[None]:
        """Mark the forwards inside as profile or warm-up steps; an enclosing
        profile or warm-up keeps its kind."""
        if kind not in STEP_KINDS:
            raise ValueError(f"step kind must be one of {STEP_KINDS}, got {kind!r}")
        saved = self._afd_step_kind
        if saved == "eager":
            self._afd_step_kind = kind
        try:
            yield
        finally:
            self._afd_step_kind = saved

    def _afd_counts(self, num_tokens: int) -> tuple[int, ...]:
        afd = self.afd_connector.config
        rank = self.afd_connector.rank
        ffn = ffn_rank_for_attention(rank, afd.num_attention_ranks, afd.num_ffn_ranks)
        block = attention_block(ffn, afd.num_attention_ranks, afd.num_ffn_ranks)
        dp_metadata = get_forward_context().dp_metadata
        dp_counts = (
            dp_metadata.num_tokens_across_dp_cpu.tolist()
            if dp_metadata is not None
            else None
        )
        tp_size = self.vllm_config.parallel_config.tensor_parallel_size
        return block_token_counts(num_tokens, dp_counts, tp_size, block)

    def _afd_begin_step(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if has_metadata():
            return None
        positions = kwargs["positions"] if "positions" in kwargs else args[1]
        payload = step_payload(
            self._afd_counts(int(positions.shape[-1])), self._afd_step_kind
        )
        connector = self.afd_connector
        # AFD-I2: the only branch between the two drivers. Without a control
        # plane the connector carries the token metadata with the data.
        if connector.control_plane is not None:
            connector.control_plane.send_dp_metadata_list(payload)
        install_metadata(AFDForwardMetadata(connector, payload.stage_key, payload))
        return None
