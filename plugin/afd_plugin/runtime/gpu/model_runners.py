# SPDX-License-Identifier: Apache-2.0
"""The CUDA role runners on vLLM's model runner V1 (``GPUModelRunner``) plus
the role mixins.

Attention: after vLLM wraps the model (full-graph or micro-batch wrapper), an
``AFDStepEntry`` wraps that, so every step, replayed graphs and idle-rank
dummy batches included, announces itself outside the graph. FFN: only the
blocks; the daemon serves steps, with the FFN graph cache in graph modes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from vllm.config import CUDAGraphMode, VllmConfig
from vllm.forward_context import get_forward_context
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_ubatch_wrapper import UBatchWrapper

from afd_plugin.connectors.base import AFDConnector
from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin, AFDStepEntry
from afd_plugin.runtime.ffn_graphs import FFNGraphCache
from afd_plugin.runtime.ffn_runner import AFDFFNRunnerMixin
from afd_plugin.runtime.model_loading import load_role_model
from afd_plugin.step_kind import StepKind
from afd_plugin.vllm_view import graph_mode_of
from afd_plugin.wire import AFDControlPayload


class AFDAttentionGPUModelRunner(AFDAttentionRunnerMixin, GPUModelRunner):
    """Attention role on CUDA, model runner V1."""

    def load_model(
        self, load_dummy_weights: bool = False, *, model: nn.Module | None = None
    ) -> None:
        if load_dummy_weights or model is not None:
            raise ValueError("AFD attention role: the role model is built by AFD")
        role_model = load_role_model(self.vllm_config, self.afd_config)
        super().load_model(model=role_model)
        # The step entry goes outermost, outside vLLM's graph and micro-batch
        # wrappers; AFD-I3: rendezvous last.
        self.afd_finish_load(role_model)

    def _afd_runs_graph(self) -> bool:
        context = get_forward_context()
        if context.cudagraph_runtime_mode != CUDAGraphMode.FULL:
            return False
        inner = self.model.runnable if isinstance(self.model, AFDStepEntry) else None
        descriptor = context.batch_descriptor
        # vLLM's micro-batch wrapper runs a step it could not split eagerly
        # when only a split graph exists for its size.
        return not (
            isinstance(inner, UBatchWrapper)
            and not context.ubatch_slices
            and descriptor is not None
            and descriptor.num_tokens in inner.cudagraphs
        )

    def _warmup_and_capture(self, *args: Any, **kwargs: Any) -> Any:
        with self.afd_step_kind(StepKind.WARMUP):
            return super()._warmup_and_capture(*args, **kwargs)

    def _dummy_run(self, *args: Any, **kwargs: Any) -> Any:
        # The mixin sets the step kind; a capturing dummy run is a capture.
        if kwargs.get("is_graph_capturing"):
            with self.afd_capturing():
                return super()._dummy_run(*args, **kwargs)
        return super()._dummy_run(*args, **kwargs)


class CudaFFNRunnerMixin(AFDFFNRunnerMixin):
    """The FFN role on CUDA, for model runner V1 and V2 alike: control-plane
    driven only (AFD-I2), the FFN graph cache in graph modes, none of vLLM's
    own KV cache, profiling, capture or scheduler work."""

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        assert connector.control_plane is not None, (
            f"{type(connector).__name__} has no control plane; the CUDA FFN runner "
            "needs one (installed at connector construction)"
        )
        super().__init__(vllm_config, device, connector)
        self.afd_graphs = None
        if graph_mode_of(vllm_config) != "eager":
            from afd_plugin.runtime.gpu.graphs import CudaGraphBackend

            self.afd_graphs = FFNGraphCache(CudaGraphBackend(device))

    def afd_device(self) -> torch.device:
        return self.device

    def afd_serve_step(
        self, payloads: tuple[AFDControlPayload, ...], kind: StepKind
    ) -> None:
        torch.cuda.set_device(self.device)  # the daemon's own thread
        super().afd_serve_step(payloads, kind)

    def load_model(
        self,
        load_dummy_weights: bool = False,
        *args: Any,
        model: nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        if load_dummy_weights or model is not None:
            raise ValueError("AFD ffn role: the role model is built by AFD")
        self.model = load_role_model(self.vllm_config, self.afd_config)
        self.afd_connector.bind(self.model.afd_spec)

    def get_model(self) -> nn.Module:
        return self.model

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        """The FFN role holds no KV cache and builds no attention state."""

    def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        self.afd_refuse_requests(scheduler_output.total_num_scheduled_tokens)
        return None

    def profile_cudagraph_memory(self) -> int:
        return 0

    def capture_model(self, *args: Any, **kwargs: Any) -> int:
        self.afd_skip_forward("graph capture (FFN graphs follow the attention side)")
        return 0

    def _dummy_run(self, *args: Any, **kwargs: Any) -> Any:
        self.afd_skip_forward("dummy run")
        return None, None


class AFDFFNGPUModelRunner(CudaFFNRunnerMixin, GPUModelRunner):
    """FFN role on CUDA, model runner V1: the daemon calls ``afd_serve_step``."""
