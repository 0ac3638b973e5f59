# SPDX-License-Identifier: Apache-2.0
"""Platform-neutral half of the FFN role's model runner: serve one step of
the daemon; refuse scheduler work; skip profile and warm-up forwards.

Mixed into each platform's runner (``runtime/cpu/model_runners.py`` on CPU,
``runtime/gpu/model_runners.py`` on CUDA).
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from vllm.forward_context import set_forward_context

from afd_plugin import step_timing
from afd_plugin.errors import FFN_REFUSAL
from afd_plugin.runtime.ffn_serve import serve_ffn_step
from afd_plugin.runtime.role import AFDRoleRunnerMixin
from afd_plugin.step_kind import StepKind

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from afd_plugin.connectors.base import DispatchWork
    from afd_plugin.models.role_model import FFNRoleModel
    from afd_plugin.runtime.ffn_graphs import FFNGraphCache
    from afd_plugin.wire import AFDControlPayload

logger = logging.getLogger("afd_plugin")
_CLOCK = step_timing.clock("ffn")


class AFDFFNRunnerMixin(AFDRoleRunnerMixin):
    """What the FFN runner adds: the step the daemon serves."""

    afd_role = "ffn"
    vllm_config: VllmConfig
    model: FFNRoleModel
    afd_graphs: FFNGraphCache | None = None
    """Set by runners whose platform captures FFN graphs (CUDA)."""

    def afd_device(self) -> torch.device:
        return torch.device("cpu")

    def afd_forward_context(
        self, num_tokens: int, profile: bool = False
    ) -> AbstractContextManager[Any]:
        """The forward context the FFN blocks run in (vLLM's MoE layers find
        themselves through it; ``profile``: a profile step); a platform whose
        layers read another one (Ascend) overrides this."""
        return set_forward_context(None, self.vllm_config, num_tokens=num_tokens)

    def afd_serve_step(
        self, payloads: tuple[AFDControlPayload, ...], kind: StepKind
    ) -> None:
        """Run every layer's block for the tokens ``payloads`` announced, in
        the order the attention ranks of this block exchange them. vLLM's MoE
        layers find themselves through the forward context; the FFN side
        needs no AFD metadata in it (the daemon holds the step)."""
        connector, model = self.afd_connector, self.model
        total = sum(p.total_tokens for p in payloads)
        profile = kind is StepKind.PROFILE
        with torch.inference_mode(), self.afd_forward_context(total, profile):
            serve_ffn_step(
                connector,
                model.run_ffn_layer,
                model.afd_layers,
                payloads,
                kind,
                self.afd_graphs,
                self.afd_device(),
            )

    def afd_serve_dispatch(self, work: DispatchWork) -> None:
        """Serve one dispatch of a connector without a control plane: the
        layer it names, on the rows it carries; answer its source."""
        connector, model = self.afd_connector, self.model
        rows = work.hidden.shape[0] + work.routed.shape[0]
        with torch.inference_mode(), self.afd_forward_context(max(rows, 1)):
            with _CLOCK.part("compute"):
                local, routed = model.run_dispatch(work)
            with _CLOCK.part("send"):
                connector.send_combine(work, local, routed)

    def afd_refuse_requests(self, scheduled_tokens: int) -> None:
        if scheduled_tokens:
            raise RuntimeError(FFN_REFUSAL)

    def profile_run(self, *args: Any, **kwargs: Any) -> None:
        self.afd_skip_forward("profile run")

    def afd_skip_forward(self, what: str, *_: Any, **__: Any) -> None:
        logger.debug("afd-plugin: FFN runner skips %s (the daemon serves steps)", what)
