# SPDX-License-Identifier: Apache-2.0
"""worker_cls="auto" mapping; explicit paths and non-AFD configs untouched; a
worker this build does not ship is refused at config time, not at import."""

from __future__ import annotations

import pytest

from afd_plugin.config import parse_afd_config
from afd_plugin.errors import AFDConfigError
from afd_plugin.worker_selection import (
    AUTO_WORKERS,
    is_afd_worker,
    platforms_in_build,
    resolve_worker_cls,
    worker_in_build,
)

BUILT = sorted(k for k, path in AUTO_WORKERS.items() if worker_in_build(path))


def afd(role: str):
    return parse_afd_config({"afd": {"role": role, "connector": "P2pGlooAFDConnector"}})


def test_the_build_ships_the_workers_of_every_platform() -> None:
    assert platforms_in_build() == ("cpu", "cuda", "npu")
    assert len(BUILT) == len(AUTO_WORKERS)


def test_auto_on_npu_resolves_to_the_ascend_workers() -> None:
    """AFD-I11 on Ascend: ``auto`` (which vllm-ascend's platform would make
    its own NPUWorker) becomes the AFD role worker of runtime/npu."""
    assert resolve_worker_cls("auto", "npu", afd("attention")) == (
        "afd_plugin.runtime.npu.attention_worker.AFDAttentionNPUWorker"
    )
    assert resolve_worker_cls("auto", "npu", afd("ffn")) == (
        "afd_plugin.runtime.npu.ffn_worker.AFDFFNNPUWorker"
    )
    # vllm-ascend's own worker with an AFD config is an error, not a guess.
    with pytest.raises(AFDConfigError, match="is not an AFD ffn worker"):
        resolve_worker_cls("vllm_ascend.worker.worker.NPUWorker", "npu", afd("ffn"))


@pytest.mark.parametrize(("platform", "role"), BUILT)
def test_auto_maps_to_the_platform_role_worker(platform: str, role: str) -> None:
    path = resolve_worker_cls("auto", platform, afd(role))
    assert path == AUTO_WORKERS[(platform, role)]
    assert path.startswith("afd_plugin.runtime.") and is_afd_worker(path)
    assert ("attention" in path.lower()) == (role == "attention")


@pytest.mark.parametrize(
    "worker_cls", ["auto", "vllm.v1.worker.cpu_worker.CPUWorker", "my.pkg.Worker"]
)
def test_non_afd_config_is_untouched(worker_cls: str) -> None:
    assert resolve_worker_cls(worker_cls, "cpu", None) == worker_cls


def test_a_worker_not_in_this_build_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build without one platform's runtime package refuses it at config
    time, naming what it runs, for ``auto`` and the explicit path alike."""
    import afd_plugin.worker_selection as selection

    real = selection.worker_in_build
    monkeypatch.setattr(
        selection, "worker_in_build", lambda path: ".npu." not in path and real(path)
    )
    for role in ("attention", "ffn"):
        for requested in ("auto", AUTO_WORKERS[("npu", role)]):
            with pytest.raises(AFDConfigError, match="is not in this build") as info:
                resolve_worker_cls(requested, "npu", afd(role))
            assert "this build runs AFD on: cpu, cuda" in str(info.value)


@pytest.mark.parametrize(("platform", "role"), BUILT)
def test_explicit_afd_worker_path_is_accepted_as_is(platform: str, role: str) -> None:
    path = AUTO_WORKERS[(platform, role)]
    assert resolve_worker_cls(path, platform, afd(role)) == path


def test_non_afd_worker_with_afd_config_is_a_loud_error() -> None:
    with pytest.raises(AFDConfigError) as info:
        resolve_worker_cls("vllm.v1.worker.cpu_worker.CPUWorker", "cpu", afd("ffn"))
    assert info.value.paths == ("parallel_config.worker_cls",)
    assert "not an AFD ffn worker" in str(info.value)
    assert AUTO_WORKERS[("cpu", "ffn")] in str(info.value)


def test_worker_of_the_other_role_is_refused() -> None:
    with pytest.raises(AFDConfigError, match="is the ffn worker but"):
        resolve_worker_cls(AUTO_WORKERS[("cpu", "ffn")], "cpu", afd("attention"))


def test_unknown_platform_is_refused() -> None:
    with pytest.raises(AFDConfigError, match="no attention worker for platform 'tpu'"):
        resolve_worker_cls("auto", "tpu", afd("attention"))
