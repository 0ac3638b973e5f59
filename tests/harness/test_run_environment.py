# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e run`` and ``afd-e2e model tiny`` in an environment that lacks
vLLM or the model-building libraries: a clear message, exit 2, nothing
started and nothing written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from lint_repo import ROOT

from afd_e2e.cli import main

_real_find_spec = importlib.util.find_spec


def without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make ``names`` look uninstalled to ``importlib.util.find_spec``."""

    def find_spec(name: str, *args: object, **kwargs: object) -> object:
        if name.split(".")[0] in names:
            return None
        return _real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_run_without_vllm_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    without(monkeypatch, "vllm")
    run_dir = tmp_path / "run"
    argv = ["run", "cpu-eager-1a1f", "--root", str(ROOT), "--run-dir", str(run_dir)]
    code = main([*argv, "--model-root", str(tmp_path / "models")])
    err = capsys.readouterr().err
    assert code == 2
    assert "vLLM is not installed" in err
    assert "pip install -e '.[cpu,eval]'" in err
    assert "nothing was started" in err
    assert not run_dir.exists()
    assert not (tmp_path / "models").exists()


def test_model_tiny_without_torch_lists_every_missing_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    without(monkeypatch, "torch", "tokenizers")
    out = tmp_path / "models"
    code = main(["model", "tiny", "--arch", "qwen3_moe", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "needs torch" in err and "tokenizers" in err
    assert "pip install -e '.[cpu]'" in err
    assert not out.exists() or not any(out.iterdir())
