# SPDX-License-Identifier: Apache-2.0
"""The CUDA role runners on vLLM's model runner V2
(``vllm.v1.worker.gpu.model_runner.GPUModelRunner``) plus the role mixins.

V2 replays full graphs through its graph manager without calling the model,
so a replayed step begins in the manager's ``run_fullgraph``
(``patches/v2_run_fullgraph.py``) and every other step (eager, capture) in
``AFDStepEntry``: the two paths are disjoint, one entry per step.
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
from afd_plugin.patches.v2_run_fullgraph import announce_before_replay
from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin
from afd_plugin.runtime.gpu.model_runners import CudaFFNRunnerMixin
from afd_plugin.runtime.model_loading import load_role_model
from afd_plugin.step_kind import StepKind


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
        role_model = load_role_model(self.vllm_config, self.afd_config)
        super().load_model(*args, model=role_model, **kwargs)
        self.afd_finish_load(role_model)  # AFD-I3: rendezvous last

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        super().initialize_kv_cache(*args, **kwargs)
        if self.cudagraph_manager is not None:
            announce_before_replay(self.cudagraph_manager, self._afd_begin_replay)

    def _afd_begin_replay(self, desc: Any) -> None:
        """The entry of a replayed step, outside the graph."""
        self.afd_announce(self.afd_plan_step(desc.num_tokens, None, True))

    def _afd_runs_graph(self) -> bool:
        # V2 captures inside its graph manager with the forward context in
        # eager mode; only a capture runs the model under a graph.
        return self._afd_capturing and torch.cuda.is_current_stream_capturing()

    def capture_model(self, *args: Any, **kwargs: Any) -> int:
        # The eager pass before each capture is a warm-up step.
        with self.afd_step_kind(StepKind.WARMUP), self.afd_capturing():
            return super().capture_model(*args, **kwargs)


class AFDFFNGPUModelRunnerV2(CudaFFNRunnerMixin, GPUModelRunnerV2):
    """FFN role on CUDA, model runner V2: the daemon calls ``afd_serve_step``."""

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        refuse_ubatching(vllm_config, "ffn")
        super().__init__(vllm_config, device, connector)
