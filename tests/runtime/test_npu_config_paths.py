# SPDX-License-Identifier: Apache-2.0
"""The Ascend config paths with real vLLM: the config patch on NPU (``auto``
resolves to the Ascend workers and gets the non-SP all-to-all fix; an
explicit worker path is left alone), the Ascend workers' constructor (the
fix and the feature checks before vllm-ascend's set-up, for explicit paths,
AFD-I11), and the CUDA and CPU registration paths, which never import
vllm-ascend (AFD-I4).

The platform name is the one seam: this machine's vLLM platform is the CPU.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest

from afd_plugin.compat.npu.runtime_config import NON_SP_ALL2ALL_BACKEND
from afd_plugin.errors import AFDConfigError
from afd_plugin.patches import config_validation
from afd_plugin.worker_selection import AUTO_WORKERS

VLLM_DEFAULT_ALL2ALL = "allgather_reducescatter"
NPU_ATTENTION = AUTO_WORKERS[("npu", "attention")]


def role_config(
    worker_cls: str,
    connector: str = "CAMP2pAFDConnector",
    sp: bool = False,
    dtype: str = "torch.bfloat16",
) -> Any:
    """The parts of a VllmConfig the config patch and the worker read."""
    return SimpleNamespace(
        additional_config={"afd": {"role": "attention", "connector": connector}},
        parallel_config=SimpleNamespace(
            worker_cls=worker_cls,
            all2all_backend=VLLM_DEFAULT_ALL2ALL,
            enable_dbo=False,
        ),
        compilation_config=SimpleNamespace(pass_config=SimpleNamespace(enable_sp=sp)),
        cache_config=SimpleNamespace(enable_prefix_caching=True),
        model_config=SimpleNamespace(dtype=dtype),
    )


@pytest.fixture
def on_npu(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The config patch as it runs inside vllm-ascend's platform hook; the
    deployment validator (tested on its own) records the platform it got."""
    validated: list[str] = []
    monkeypatch.setattr(config_validation, "current_platform_name", lambda: "npu")
    monkeypatch.setattr(
        config_validation,
        "validate_role",
        lambda config, afd, platform, **kw: validated.append(platform),
    )
    return validated


def test_auto_on_npu_gets_the_ascend_worker_and_the_all2all_fix(
    on_npu: list[str],
) -> None:
    config = role_config("auto")
    config_validation.normalize_afd_config(config, "auto", False)
    assert config.parallel_config.worker_cls == NPU_ATTENTION
    assert config.parallel_config.all2all_backend == NON_SP_ALL2ALL_BACKEND
    assert on_npu == ["npu"]


def test_with_sequence_parallelism_auto_keeps_vllms_all2all(on_npu: list[str]) -> None:
    config = role_config("auto", sp=True)
    config_validation.normalize_afd_config(config, "auto", False)
    assert config.parallel_config.worker_cls == NPU_ATTENTION
    assert config.parallel_config.all2all_backend == VLLM_DEFAULT_ALL2ALL


def test_an_explicit_worker_path_is_left_alone_by_the_config_patch(
    on_npu: list[str],
) -> None:
    """The explicit path keeps its value; the fix is the worker's to apply."""
    config = role_config(NPU_ATTENTION)
    config_validation.normalize_afd_config(config, NPU_ATTENTION, False)
    assert config.parallel_config.worker_cls == NPU_ATTENTION
    assert config.parallel_config.all2all_backend == VLLM_DEFAULT_ALL2ALL


class VllmAscendWorker:
    """Stands in for vllm-ascend's NPUWorker (not installable here): records
    the all-to-all backend its set-up saw."""

    def __init__(self, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        self.saw_all2all = vllm_config.parallel_config.all2all_backend


@pytest.fixture
def ascend_worker(monkeypatch: pytest.MonkeyPatch) -> type:
    from afd_plugin.runtime import role_worker
    from afd_plugin.runtime.npu.role_worker import AFDNPUWorkerMixin

    # That register() applied the patches is checked in test_patch_targets.
    monkeypatch.setattr(role_worker, "require_patches", lambda: None)

    class Worker(AFDNPUWorkerMixin, VllmAscendWorker):
        afd_role = "attention"

    return Worker


def test_the_ascend_worker_applies_the_fix_before_vllm_ascends_set_up(
    ascend_worker: type,
) -> None:
    config = role_config(NPU_ATTENTION)
    worker = ascend_worker(config, local_rank=0, rank=0)
    assert worker.saw_all2all == NON_SP_ALL2ALL_BACKEND
    assert config.parallel_config.worker_cls == NPU_ATTENTION
    assert worker.afd.connector == "CAMP2pAFDConnector"


def test_the_ascend_worker_refuses_what_the_ops_cannot_move(
    ascend_worker: type,
) -> None:
    """CAM P2P moves bf16 only: a float32 model fails in the constructor,
    naming the flag, before vllm-ascend's set-up."""
    config = role_config(NPU_ATTENTION, dtype="torch.float32")
    with pytest.raises(AFDConfigError, match="--dtype bfloat16"):
        ascend_worker(config)
    assert config.parallel_config.all2all_backend == VLLM_DEFAULT_ALL2ALL


def test_the_cuda_and_cpu_registration_paths_never_import_vllm_ascend() -> None:
    """register() and the config patch on CUDA and CPU, in a fresh
    interpreter where importing vllm_ascend or torch_npu is recorded and
    fails: nothing tries, and no Ascend module of the plugin is loaded.

    A probe (``importlib.util.find_spec``, as transformers makes for
    ``torch_npu`` when vLLM's engine modules load) imports nothing; it is
    answered "not installed", as on a machine without the Ascend stack."""
    script = textwrap.dedent(
        """
        import importlib.abc, importlib.util, sys
        from types import SimpleNamespace as NS
        tried = []
        def is_probe(frame):
            # the import machinery's own frames up to the caller: a probe
            # passes through importlib.util.find_spec, an import does not
            while frame is not None and (
                frame.f_code.co_filename.startswith("<frozen importlib")
                or "/importlib/" in frame.f_code.co_filename
            ):
                if frame.f_code.co_name == "find_spec" and frame.f_code.co_filename in (
                    "<frozen importlib.util>", importlib.util.__file__
                ):
                    return True
                frame = frame.f_back
            return False
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("vllm_ascend", "torch_npu"):
                    if is_probe(sys._getframe(1)):
                        return None
                    tried.append(name)
                    raise ModuleNotFoundError(name)
        sys.meta_path.insert(0, Block())
        import afd_plugin
        afd_plugin.register()
        from afd_plugin.patches import config_validation as cv
        cv.validate_role = lambda *a, **k: None
        for platform, connector in (
            ("cuda", "P2pNcclAFDConnector"), ("cpu", "P2pGlooAFDConnector")
        ):
            cv.current_platform_name = lambda p=platform: p
            config = NS(
                additional_config={"afd": {"role": "ffn", "connector": connector}},
                parallel_config=NS(worker_cls="auto", all2all_backend="x"),
                compilation_config=NS(pass_config=NS(enable_sp=False)),
                cache_config=NS(enable_prefix_caching=True, mamba_block_size=None),
            )
            cv.normalize_afd_config(config, "auto", False)
            print("worker", platform, config.parallel_config.worker_cls)
            print("all2all", platform, config.parallel_config.all2all_backend)
        ascend = sorted(
            m for m in sys.modules
            if m.startswith(("vllm_ascend", "torch_npu"))
            or m.startswith("afd_plugin.") and ".npu" in m
        )
        print("tried", tried)
        print("loaded", ascend)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert f"worker cuda {AUTO_WORKERS[('cuda', 'ffn')]}" in lines
    assert f"worker cpu {AUTO_WORKERS[('cpu', 'ffn')]}" in lines
    assert "all2all cuda x" in lines and "all2all cpu x" in lines
    assert "tried []" in lines, done.stdout
    assert "loaded []" in lines, done.stdout
