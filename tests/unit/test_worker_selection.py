"""worker_cls="auto" mapping; explicit paths and non-AFD configs untouched."""

from __future__ import annotations

import pytest

from afd_plugin.config import parse_afd_config
from afd_plugin.errors import AFDConfigError
from afd_plugin.worker_selection import AUTO_WORKERS, is_afd_worker, resolve_worker_cls


def afd(role: str):
    return parse_afd_config({"afd": {"role": role, "connector": "P2pGlooAFDConnector"}})


@pytest.mark.parametrize(("platform", "role"), sorted(AUTO_WORKERS))
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


@pytest.mark.parametrize(("platform", "role"), sorted(AUTO_WORKERS))
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
