# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the CPU end-to-end tests: tiny local models, log directory,
and a guard that every server a test started is gone when it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from afd_e2e.processes.servers import VllmServers
from afd_e2e.tiny_model import build_tiny_model, default_root


@pytest.fixture(scope="session")
def tiny_model_root() -> Path:
    return default_root()


@pytest.fixture(scope="session")
def deepseek_v2(tiny_model_root: Path) -> Path:
    return build_tiny_model("deepseek_v2", tiny_model_root)


@pytest.fixture(scope="session")
def qwen3_moe(tiny_model_root: Path) -> Path:
    return build_tiny_model("qwen3_moe", tiny_model_root)


@pytest.fixture(scope="session")
def qwen3_5_moe(tiny_model_root: Path) -> Path:
    return build_tiny_model("qwen3_5_moe", tiny_model_root)


@pytest.fixture(scope="session")
def qwen3_5_moe_vl(tiny_model_root: Path) -> Path:
    return build_tiny_model("qwen3_5_moe_vl", tiny_model_root)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def servers(log_dir: Path) -> Iterator[VllmServers]:
    """The test's servers; afterwards each is stopped, and one that needed
    SIGKILL or left a process behind fails the test."""
    started = VllmServers(log_dir)
    try:
        yield started
    finally:
        problems = started.stop_all()
    assert not problems, "; ".join(problems)
