"""The CUDA role runners on vLLM's model runner V2
(``vllm.v1.worker.gpu.model_runner.GPUModelRunner``) plus the role mixins.

V2 replays full graphs through its graph manager without calling the model,
so the attention side announces a replay in a wrapper of the manager's
``run_fullgraph``; eager steps and captures go through ``AFDStepEntry``.
V2 pairs run without micro-batching here (AFD-I8 constraints come from the
shared validator; DBO on V2 is refused at construction).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.v1.worker.gpu.model_runner import GPUModelRunner as GPUModelRunnerV2

from afd_plugin.connectors.base import AFDConnector
from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin, AFDStepEntry
from afd_plugin.runtime.gpu.model_runners import CudaFFNRunnerMixin
from afd_plugin.runtime.model_loading import load_role_model


def refuse_ubatching(vllm_config: VllmConfig, role: str) -> None:
    if vllm_config.parallel_config.use_ubatching:
        raise NotImplementedError(
            f"AFD {role} role on model runner V2 runs without micro-batching in "
            "this build; drop --enable-dbo or use model runner V1"
        )


class AFDAttentionGPUModelRunnerV2(AFDAttentionRunnerMixin, GPUModelRunnerV2):
    """Attention role on CUDA, model runner V2."""

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        refuse_ubatching(vllm_config, "attention")
        super().__init__(vllm_config, device, connector)

    def load_model(
        self,
        load_dummy_weights: bool = False,
        *args: Any,
        model: nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        if load_dummy_weights or model is not None:
            raise ValueError("AFD attention role: the role model is built by AFD")
        role_model = load_role_model(self.vllm_config, "attention")
        super().load_model(*args, model=role_model, **kwargs)
        self.model = AFDStepEntry(self.model, self.afd_begin_step)
        self.afd_finish_load(role_model)  # AFD-I3: rendezvous last

    def get_model(self) -> nn.Module:
        model = self.model
        return model.unwrap() if isinstance(model, AFDStepEntry) else model

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        super().initialize_kv_cache(*args, **kwargs)
        manager = self.cudagraph_manager
        if manager is None:
            return
        replay = manager.run_fullgraph

        def run_fullgraph(desc: Any) -> Any:
            # Outside the graph: the replayed Python never runs.
            self.afd_announce(self.afd_plan_step(desc.num_tokens, None, True))
            return replay(desc)

        manager.run_fullgraph = run_fullgraph

    def _afd_runs_graph(self) -> bool:
        # V2 captures inside its graph manager with the forward context in
        # eager mode; only a capture runs the model under a graph.
        return self._afd_capturing and torch.cuda.is_current_stream_capturing()

    def capture_model(self, *args: Any, **kwargs: Any) -> int:
        # The eager pass before each capture is a warm-up step.
        with self.afd_step_kind("warmup"), self.afd_capturing():
            return super().capture_model(*args, **kwargs)


class AFDFFNGPUModelRunnerV2(CudaFFNRunnerMixin, GPUModelRunnerV2):
    """FFN role on CUDA, model runner V2: the daemon calls ``afd_serve_step``."""

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        refuse_ubatching(vllm_config, "ffn")
        super().__init__(vllm_config, device, connector)
