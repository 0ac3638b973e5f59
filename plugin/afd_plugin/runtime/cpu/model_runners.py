"""The CPU role runners: vLLM's CPUModelRunner plus the role mixins.

Attention: load the attention half, then rendezvous. FFN: load the FFN half,
never run scheduler work or vLLM's own profile / warm-up forwards.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.config import VllmConfig
from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from afd_plugin.connectors.base import AFDConnector
from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin
from afd_plugin.runtime.ffn_runner import AFDFFNRunnerMixin
from afd_plugin.runtime.model_loading import load_role_model


def _refuse_extras(runner: CPUModelRunner, role: str) -> None:
    if runner.lora_config:
        raise ValueError(f"AFD {role} role: LoRA is not supported")
    if runner.speculative_config is not None:
        raise ValueError(f"AFD {role} role: speculative decoding is not supported")


class AFDAttentionCPUModelRunner(AFDAttentionRunnerMixin, CPUModelRunner):
    """Attention role on CPU."""

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        super().__init__(vllm_config, device)
        self.afd_connector = connector

    def load_model(self, load_dummy_weights: bool = False) -> None:
        if load_dummy_weights:
            raise ValueError("AFD attention role: dummy weights are not supported")
        _refuse_extras(self, "attention")
        self.model = load_role_model(self.vllm_config, "attention")
        # Nothing wraps the model on CPU (no micro-batching); rendezvous last.
        self.afd_finish_load(self.model)

    # Step kinds for the control payload. A dummy batch outside warm-up and
    # profiling (an idle DP rank keeping step with its peers) is a plain step,
    # so every rank of a block announces the same payload.

    def warming_up_model(self) -> None:
        with self.afd_step_kind("warmup"):
            super().warming_up_model()

    def profile_run(self, *args: Any, **kwargs: Any) -> None:
        with self.afd_step_kind("profile"):
            super().profile_run(*args, **kwargs)

    def _dummy_run(self, *args: Any, **kwargs: Any) -> Any:
        kind = "profile" if kwargs.get("is_profile") else self._afd_step_kind
        with self.afd_step_kind(kind):
            return super()._dummy_run(*args, **kwargs)


class AFDFFNCPUModelRunner(AFDFFNRunnerMixin, CPUModelRunner):
    """FFN role on CPU: the daemon calls ``afd_serve_step``."""

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        super().__init__(vllm_config, device)
        self.afd_connector = connector

    def load_model(self, load_dummy_weights: bool = False) -> None:
        if load_dummy_weights:
            raise ValueError("AFD ffn role: dummy weights are not supported")
        _refuse_extras(self, "ffn")
        self.model = load_role_model(self.vllm_config, "ffn")
        self.afd_connector.bind(self.model.afd_spec)

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self.afd_refuse_requests(scheduler_output.total_num_scheduled_tokens)
        return super().execute_model(scheduler_output, *args, **kwargs)

    def warming_up_model(self) -> None:
        self.afd_skip_forward("warm-up")

    def profile_run(self, *args: Any, **kwargs: Any) -> None:
        self.afd_skip_forward("profile run")

    def _dummy_run(self, *args: Any, **kwargs: Any) -> Any:
        self.afd_skip_forward("dummy run")
        return None
