# SPDX-License-Identifier: Apache-2.0
"""The Ascend runtime against the vllm-ascend source it is written for.

``tests/data/vllm_ascend_api.json`` records, from vllm-ascend's main line at
the commit the README names, every method and function the runtime
overrides or calls, with its parameters and line (written by
``scripts/vllm_ascend_api.py`` from that source, never by hand). Here the
runtime's own source is read (nothing imports vllm-ascend or torch_npu):

- every vllm-ascend name it imports is in the manifest;
- every method its NPU classes define overrides a recorded method of a
  vllm-ascend base (or is AFD's own, or comes from the shared role mixins)
  and accepts the recorded parameters;
- every call of a recorded vllm-ascend function passes parameters it has.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((ROOT / "tests/data/vllm_ascend_api.json").read_text())
API: dict[str, dict] = MANIFEST["api"]
SOURCES = [
    ROOT / "plugin/afd_plugin/runtime/npu/attention_worker.py",
    ROOT / "plugin/afd_plugin/runtime/npu/ffn_worker.py",
    ROOT / "plugin/afd_plugin/runtime/npu/model_runners.py",
    ROOT / "plugin/afd_plugin/runtime/npu/role_worker.py",
    ROOT / "plugin/afd_plugin/compat/npu/forward_context.py",
]
# Methods the shared, platform-neutral mixins define (their targets are
# vLLM's own runner and worker methods, checked against vLLM elsewhere).
MIXIN_SOURCES = [
    ROOT / "plugin/afd_plugin/runtime/attention_runner.py",
    ROOT / "plugin/afd_plugin/runtime/ffn_runner.py",
    ROOT / "plugin/afd_plugin/runtime/role.py",
    ROOT / "plugin/afd_plugin/runtime/role_worker.py",
]


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def ascend_imports(module: ast.Module) -> dict[str, str]:
    """Local name -> ``module:name`` of each ``from vllm_ascend... import``."""
    out = {}
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "vllm_ascend"
        ):
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        if isinstance(node, ast.ImportFrom) and node.module == "vllm_ascend":
            for alias in node.names:
                out[alias.asname or alias.name] = f"vllm_ascend.{alias.name}:"
    return out


def mixin_methods() -> set[str]:
    names = set()
    for path in MIXIN_SOURCES:
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
    return names


def accepts(ours: ast.FunctionDef, theirs: dict) -> str | None:
    """Why ``ours`` cannot stand in for the recorded method; None when it can."""
    a = ours.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if a.vararg is not None and a.kwarg is not None:
        return None
    wanted = theirs["positional"] + theirs["keyword_only"]
    missing = [n for n in wanted if n not in names and a.kwarg is None]
    if missing:
        return f"does not take {missing}"
    if names[: len(theirs["positional"])] != theirs["positional"][: len(names)]:
        return f"positional {names} differ from {theirs['positional']}"
    return None


def test_the_manifest_is_from_the_commit_the_readme_names() -> None:
    commit = MANIFEST["commit"]
    assert re.fullmatch(r"[0-9a-f]{40}", commit)
    assert commit[:8] in (ROOT / "README.md").read_text()
    for entry in API.values():
        assert entry["line"] > 0 and entry["file"].startswith("vllm_ascend/")


def test_every_imported_vllm_ascend_name_is_recorded() -> None:
    classes = {k.split(":")[0] + ":" + k.split(":")[1].split(".")[0] for k in API}
    functions = set(API)
    for path in SOURCES:
        for target in ascend_imports(tree(path)).values():
            module, name = target.split(":")
            if not name:  # "from vllm_ascend import module"
                assert any(k.startswith(f"{module}:") for k in API), target
                continue
            assert target in classes or target in functions, (path.name, target)


@pytest.mark.parametrize("path", SOURCES[:4], ids=lambda p: p.name)
def test_every_override_matches_a_recorded_vllm_ascend_method(path: Path) -> None:
    module = tree(path)
    imports = ascend_imports(module)
    local_classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}
    shared = mixin_methods()

    def ascend_bases(cls: ast.ClassDef) -> list[str]:
        out = []
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in imports:
                out.append(imports[base.id])
            elif isinstance(base, ast.Name) and base.id in local_classes:
                out += ascend_bases(local_classes[base.id])
        return out

    checked = 0
    for cls in local_classes.values():
        bases = ascend_bases(cls)
        if not bases:
            continue
        for node in cls.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            recorded = [
                API[f"{b}.{node.name}"] for b in bases if f"{b}.{node.name}" in API
            ]
            if not recorded:
                assert node.name.startswith("afd_") or node.name in shared, (
                    f"{cls.name}.{node.name} overrides no recorded vllm-ascend "
                    f"method of {bases}: add it to scripts/vllm_ascend_api.py"
                )
                continue
            for theirs in recorded:
                why = accepts(node, theirs)
                assert why is None, (
                    f"{cls.name}.{node.name} {why} ({theirs['file']}:{theirs['line']})"
                )
                checked += 1
    assert checked > 0 or path.name == "role_worker.py"


def test_calls_of_vllm_ascend_functions_pass_recorded_parameters() -> None:
    calls = 0
    for path in SOURCES:
        module = tree(path)
        for node in ast.walk(module):
            if not isinstance(node, ast.Call) or not isinstance(
                node.func, ast.Attribute
            ):
                continue
            if (
                not isinstance(node.func.value, ast.Name)
                or node.func.value.id != "ascend"
            ):
                continue
            key = f"vllm_ascend.ascend_forward_context:{node.func.attr}"
            assert key in API, key
            theirs = API[key]
            names = theirs["positional"] + theirs["keyword_only"]
            assert len(node.args) <= len(theirs["positional"]), key
            for keyword in node.keywords:
                assert keyword.arg in names, f"{key} has no parameter {keyword.arg}"
            calls += 1
    assert calls == 2  # set_ascend_forward_context (V1), the MRv2 profile override


def test_the_worker_builds_its_runner_in_init_device_as_recorded() -> None:
    """The role workers replace the runner after NPUWorker.init_device built
    it; that method exists, takes only self, and the runners take
    (vllm_config, device) there."""
    assert API["vllm_ascend.worker.worker:NPUWorker.init_device"]["positional"] == [
        "self"
    ]
    for key in (
        "vllm_ascend.worker.model_runner_v1:NPUModelRunner.__init__",
        "vllm_ascend.worker.v2.model_runner:NPUModelRunner.__init__",
    ):
        assert API[key]["positional"] == ["self", "vllm_config", "device"]
