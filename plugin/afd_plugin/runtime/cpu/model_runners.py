# SPDX-License-Identifier: Apache-2.0
"""The CPU role runners: vLLM's CPUModelRunner plus the role mixins.

Attention: load the attention half, then rendezvous. FFN: load the FFN half,
never run scheduler work or vLLM's own profile / warm-up forwards.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin
from afd_plugin.runtime.ffn_runner import AFDFFNRunnerMixin
from afd_plugin.runtime.model_loading import load_role_model
from afd_plugin.step_kind import StepKind


class AFDAttentionCPUModelRunner(AFDAttentionRunnerMixin, CPUModelRunner):
    """Attention role on CPU."""

    def load_model(self, load_dummy_weights: bool = False) -> None:
        if load_dummy_weights:
            raise ValueError("AFD attention role: dummy weights are not supported")
        self.model = load_role_model(self.vllm_config, self.afd_config)
        # Nothing of vLLM wraps the model on CPU (no micro-batching).
        self.afd_finish_load(self.model)  # AFD-I3: rendezvous last

    def warming_up_model(self) -> None:
        with self.afd_step_kind(StepKind.WARMUP):
            super().warming_up_model()


class AFDFFNCPUModelRunner(AFDFFNRunnerMixin, CPUModelRunner):
    """FFN role on CPU: the daemon calls ``afd_serve_step``."""

    def load_model(self, load_dummy_weights: bool = False) -> None:
        if load_dummy_weights:
            raise ValueError("AFD ffn role: dummy weights are not supported")
        self.model = load_role_model(self.vllm_config, self.afd_config)
        self.afd_connector.bind(self.model.afd_spec)

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self.afd_refuse_requests(scheduler_output.total_num_scheduled_tokens)
        return super().execute_model(scheduler_output, *args, **kwargs)

    def warming_up_model(self) -> None:
        self.afd_skip_forward("warm-up")

    def _dummy_run(self, *args: Any, **kwargs: Any) -> Any:
        self.afd_skip_forward("dummy run")
        return None
