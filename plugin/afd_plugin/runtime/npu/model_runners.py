# SPDX-License-Identifier: Apache-2.0
"""The Ascend role runners: vllm-ascend's NPUModelRunner (V1) plus the role
mixins, and the FFN runner of model runner V2.

Attention: load the attention half, then rendezvous (AFD-I3). FFN: load the
FFN half, never run scheduler work or vLLM's own profile / warm-up forwards,
and run the blocks in vllm-ascend's forward context
(``compat/npu/forward_context.py``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
from vllm_ascend.worker.model_runner_v1 import NPUModelRunner
from vllm_ascend.worker.v2.model_runner import NPUModelRunner as NPUModelRunnerV2

from afd_plugin.compat.npu.forward_context import ffn_forward_context
from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin
from afd_plugin.runtime.ffn_runner import AFDFFNRunnerMixin
from afd_plugin.runtime.model_loading import load_role_model


class AFDAttentionNPUModelRunner(AFDAttentionRunnerMixin, NPUModelRunner):
    """Attention role on Ascend, model runner V1."""

    def load_model(self) -> None:
        model = load_role_model(self.vllm_config, self.afd_config)
        self.model = model
        self.afd_finish_load(model)  # AFD-I3: rendezvous last


class _AFDFFNNPURunner(AFDFFNRunnerMixin):
    """What both FFN runners on Ascend add to the shared FFN mixin."""

    afd_model_runner_v2 = False

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        self.model = load_role_model(self.vllm_config, self.afd_config)
        self.afd_connector.bind(self.model.afd_spec)

    def get_model(self) -> Any:
        return self.model

    def afd_device(self) -> torch.device:
        return self.device  # type: ignore[attr-defined]

    def afd_forward_context(
        self, num_tokens: int, profile: bool = False
    ) -> AbstractContextManager[Any]:
        return ffn_forward_context(
            self.vllm_config,
            num_tokens,
            profile=profile,
            model_runner_v2=self.afd_model_runner_v2,
        )

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        """The FFN role holds no KV cache and builds no attention state."""

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self.afd_refuse_requests(scheduler_output.total_num_scheduled_tokens)
        return None

    def _dummy_run(self, *args: Any, **kwargs: Any) -> Any:
        self.afd_skip_forward("dummy run")
        return None, None

    def capture_model(self, *args: Any, **kwargs: Any) -> int:
        """The FFN graphs follow the attention side's capture steps (through
        the daemon); vLLM's own capture has nothing to run here."""
        self.afd_skip_forward("graph capture")
        return 0


class AFDFFNNPUModelRunner(_AFDFFNNPURunner, NPUModelRunner):
    """FFN role on Ascend, model runner V1: the daemon calls ``afd_serve_step``
    (or ``afd_serve_dispatch`` without a control plane)."""


class AFDFFNNPUModelRunnerV2(_AFDFFNNPURunner, NPUModelRunnerV2):
    """FFN role on Ascend, model runner V2 (vLLM's forward context inside
    vllm-ascend's profile-run override)."""

    afd_model_runner_v2 = True
