# SPDX-License-Identifier: Apache-2.0
"""The CPU role runners: vLLM's CPUModelRunner plus the role mixins.

Attention: load the attention half, then rendezvous; with
``afd.micro_batches: 2``, split decode steps into two micro-batches
(``micro_batches.py``). FFN: load the FFN half, never run scheduler work or
vLLM's own profile / warm-up forwards.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.ubatch_utils import check_ubatch_thresholds

from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin
from afd_plugin.runtime.cpu.micro_batches import CPUMicroBatchModel
from afd_plugin.runtime.ffn_runner import AFDFFNRunnerMixin
from afd_plugin.runtime.model_loading import load_role_model
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import request_boundary_split

if TYPE_CHECKING:
    import numpy as np
    import torch
    from vllm.config import ParallelConfig, VllmConfig

    from afd_plugin.connectors.base import AFDConnector


def micro_batch_view(parallel: ParallelConfig, count: int) -> ParallelConfig:
    """This runner's own view of the parallel config with ``count``
    micro-batches: vLLM's runner then builds one attention metadata builder
    per micro-batch, vetoes splits that would break a prefix hit, and slices
    the step. The engine's config keeps DBO off (vLLM's CPU platform turns it
    off, and its checks of microbatching assume CUDA all-to-all backends)."""
    view = copy.copy(parallel)
    view.ubatch_size = count
    return view


class AFDAttentionCPUModelRunner(AFDAttentionRunnerMixin, CPUModelRunner):
    """Attention role on CPU."""

    def __init__(
        self, vllm_config: VllmConfig, device: torch.device, connector: AFDConnector
    ) -> None:
        super().__init__(vllm_config, device, connector)
        count = self.afd_config.micro_batches
        if count > 1:
            self.parallel_config = micro_batch_view(self.parallel_config, count)

    def load_model(self, load_dummy_weights: bool = False) -> None:
        if load_dummy_weights:
            raise ValueError("AFD attention role: dummy weights are not supported")
        model = load_role_model(self.vllm_config, self.afd_config)
        count = self.afd_config.micro_batches
        self.model = (
            CPUMicroBatchModel(model, self.vllm_config, count) if count > 1 else model
        )
        self.afd_finish_load(model)  # AFD-I3: rendezvous last

    def warming_up_model(self) -> None:
        with self.afd_step_kind(StepKind.WARMUP):
            super().warming_up_model()

    def _determine_batch_execution_and_padding(
        self,
        num_tokens: int,
        num_reqs: int,
        num_scheduled_tokens_np: np.ndarray,
        max_num_scheduled_tokens: int,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """Each attention rank splits its own step. vLLM's DP coordination
        would split every DP rank or none, padded alike (its CUDA DBO); here
        it only syncs the ranks' token counts, unpadded, and each rank splits
        a decode-only step of two or more requests and at least
        ``--dbo-decode-token-threshold`` tokens, unless vLLM vetoed it or
        vLLM's even token cut would fall inside a request
        (``step_protocol.request_boundary_split``). Its FFN rank assembles
        each stage from the ranks' own announcements, zeros included."""
        count = self.afd_config.micro_batches
        allow = kwargs.get("allow_microbatching", True)
        if count > 1:
            kwargs["allow_microbatching"] = False
        result = super()._determine_batch_execution_and_padding(
            num_tokens,
            num_reqs,
            num_scheduled_tokens_np,
            max_num_scheduled_tokens,
            *args,
            **kwargs,
        )
        if count < 2:
            return result
        mode, descriptor, _, across_dp, stats = result
        uniform_decode = self._is_uniform_decode(
            max_num_scheduled_tokens=max_num_scheduled_tokens,
            uniform_decode_query_len=self.uniform_decode_query_len,
            num_tokens=num_tokens,
            num_reqs=num_reqs,
            force_uniform_decode=kwargs.get("force_uniform_decode"),
        )
        split = (
            allow
            and uniform_decode
            and descriptor.num_tokens == num_tokens  # no padding to cut
            and check_ubatch_thresholds(self.parallel_config, num_tokens, True)
            and request_boundary_split(
                [int(n) for n in num_scheduled_tokens_np[:num_reqs]], count
            )
            is not None
        )
        return mode, descriptor, bool(split), across_dp, stats


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
