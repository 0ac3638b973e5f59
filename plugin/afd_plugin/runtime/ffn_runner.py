"""Platform-neutral half of the FFN role's model runner: serve one step of
the daemon; refuse scheduler work; skip profile and warm-up forwards.

Mixed into each platform's runner (``runtime/cpu/model_runners.py`` on CPU).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from vllm.forward_context import set_forward_context

from afd_plugin.models.role_model import FFN_REFUSAL
from afd_plugin.runtime.ffn_daemon import FFNBranch
from afd_plugin.runtime.metadata import AFDForwardMetadata, install_metadata

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from afd_plugin.connectors.base import AFDConnector
    from afd_plugin.models.role_model import FFNRoleModel
    from afd_plugin.wire import AFDControlPayload

logger = logging.getLogger("afd_plugin")


class AFDFFNRunnerMixin:
    """What the FFN runner adds: the step the daemon serves."""

    vllm_config: VllmConfig
    afd_connector: AFDConnector
    model: FFNRoleModel

    def afd_serve_step(self, payload: AFDControlPayload, branch: FFNBranch) -> None:
        """Run every layer's block for the tokens ``payload`` announced, in
        layer order, exchanging with the attention ranks of this block."""
        if branch is FFNBranch.GRAPH:
            raise NotImplementedError("FFN graph steps need a graph backend")
        connector, model = self.afd_connector, self.model
        stage = payload.stage_key
        with (
            torch.inference_mode(),
            set_forward_context(
                None, self.vllm_config, num_tokens=payload.total_tokens
            ),
        ):
            install_metadata(AFDForwardMetadata(connector, stage, payload))
            for layer in model.afd_layers:
                hidden, extras = connector.recv_attn_output(layer, stage)
                out = model.run_ffn_layer(layer, hidden, extras.get("router_logits"))
                connector.send_ffn_output(out, layer, stage)

    def afd_refuse_requests(self, scheduled_tokens: int) -> None:
        if scheduled_tokens:
            raise RuntimeError(FFN_REFUSAL)

    def afd_skip_forward(self, what: str, *_: Any, **__: Any) -> None:
        logger.debug("afd-plugin: FFN runner skips %s (the daemon serves steps)", what)
