# SPDX-License-Identifier: Apache-2.0
"""AFD's counters in a role's process: the step clock feeds them, every series
exists from the start, failures and refusals are counted, the counter file
carries them to the API server, and AFD_METRICS=0 leaves everything off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from afd_plugin import metrics, metrics_file, step_timing
from afd_plugin.connectors.base import AFDPeerError
from afd_plugin.wire import AFDWireError

Read = Callable[..., "float | None"]


def server_dir(tmp: Path) -> Path:
    """The counter directory this process names under ``tmp``."""
    return tmp / f"afd-metrics-{os.getpid()}"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own clocks and counters (the process-wide ones stay)."""
    monkeypatch.setattr(step_timing, "_clocks", {})
    monkeypatch.setattr(metrics, "_backend", None)
    monkeypatch.setattr(metrics, "_installed", {})


@pytest.fixture
def from_file(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Read]:
    """Counters through the server's counter directory (the default)."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.delenv(metrics_file.ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def read(name: str, **labels: str) -> float | None:
        backend = metrics.backend()
        assert isinstance(backend, metrics_file.CounterFile)
        backend.flush()
        values = metrics_file.read_directory(str(server_dir(tmp_path)))
        return values.get(metrics_file.key(name, labels))

    yield read
    backend = metrics._backend
    if isinstance(backend, metrics_file.CounterFile):
        backend.close()


@pytest.fixture
def from_registry(fresh: None, monkeypatch: pytest.MonkeyPatch) -> Read:
    """Counters as prometheus_client counters (PROMETHEUS_MULTIPROC_DIR set;
    in this process they stay in memory, which the registry reads alike)."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "set")

    def read(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(f"{name}_total", labels)

    return read


@pytest.fixture(params=["file", "registry"])
def read(request: pytest.FixtureRequest) -> Read:
    return request.getfixturevalue(f"from_{request.param}")


def test_steps_and_parts_are_counted_per_role_and_rank(read: Read) -> None:
    assert metrics.install("ffn", 7)
    labels = {"role": "ffn", "rank": "7"}
    # Every part's series is there before any step, at 0.
    for part in step_timing.FFN_PARTS:
        assert read("afd:step_part_seconds", part=part, **labels) == 0.0
    before = read("afd:steps", **labels)
    clock = step_timing.clock("ffn")
    clock.step()
    clock.add("compute", 0.25)
    clock.add("recv", 0.5)
    clock.step()
    clock.add("compute", 0.25)
    clock.step()
    assert read("afd:steps", **labels) == before + 2
    assert read("afd:step_part_seconds", part="compute", **labels) >= 0.5
    assert metrics.install("ffn", 7)  # once per process: no second sink
    clock.add("send", 1.0)
    clock.step()
    assert read("afd:step_part_seconds", part="send", **labels) >= 1.0


def test_failures_are_counted_by_reason(read: Read) -> None:
    metrics.count_failure("attention", 2, AFDPeerError("ffn rank 0 left"))
    metrics.count_failure("attention", 2, TimeoutError("no answer in 30 s"))
    metrics.count_failure("attention", 2, AFDWireError("stage 1 before stage 0"))
    labels = {"role": "attention", "rank": "2"}
    assert read("afd:exchange_failures", reason="peer", **labels) >= 2
    assert read("afd:exchange_failures", reason="wire", **labels) >= 1
    assert metrics.failure_reason(ValueError("x")) == "error"


def test_the_counter_file_sums_every_process_of_the_server(
    from_file: Read, tmp_path: Path
) -> None:
    # Another process of the same server (a second TP worker) wrote its file.
    metrics.count_refusal("auth")
    directory = server_dir(tmp_path)
    (directory / "1.json").write_text(
        json.dumps(
            {
                "pid": 1,
                "series": [
                    {
                        "name": "afd:rendezvous_refusals",
                        "labels": {"reason": "auth"},
                        "value": 2,
                    }
                ],
            }
        )
    )
    (directory / "2.json").write_text("{half written")  # skipped, not fatal
    assert from_file("afd:rendezvous_refusals", reason="auth") == 3.0


def test_the_first_process_names_the_directory_and_children_inherit_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(metrics_file.ENV, raising=False)
    named = metrics_file.claim_directory()
    assert Path(named).name == f"afd-metrics-{os.getpid()}"
    assert metrics_file.claim_directory() == named  # the same process
    # A child (the engine of this API server) keeps its parent's directory;
    # a name from outside its ancestry is replaced.
    child = (
        "import os\n"
        "from afd_plugin import metrics_file\n"
        "print(metrics_file.claim_directory())\n"
    )
    run = [sys.executable, "-c", child]
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert out.strip() == named
    stray = str(tmp_path / "afd-metrics-1")  # pid 1 is no server of ours
    monkeypatch.setenv(metrics_file.ENV, stray)
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert out.strip() not in (stray, named)
    assert out.strip().endswith(tuple("0123456789"))


def test_off_leaves_the_clock_untimed_and_counts_nothing(
    from_file: Read, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AFD_METRICS", "0")
    monkeypatch.delenv("AFD_STEP_TIMING", raising=False)
    assert not metrics.install("attention", 3)
    assert not step_timing.clock("attention").enabled
    metrics.count_micro_batches("attention", 3, 2)
    metrics.count_failure("attention", 3, AFDPeerError("gone"))
    assert metrics._backend is None
    assert not server_dir(tmp_path).exists()
