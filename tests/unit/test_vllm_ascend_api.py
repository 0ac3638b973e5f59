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
    assert commit[:8] in (ROOT / "docs" / "deploying" / "ascend.md").read_text()
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


def afd_classes() -> dict[str, ast.ClassDef]:
    """Every class of the Ascend runtime and of the shared role mixins, by
    name (the names are unique across these files)."""
    out: dict[str, ast.ClassDef] = {}
    for path in [*SOURCES, *MIXIN_SOURCES]:
        for node in tree(path).body:
            if isinstance(node, ast.ClassDef):
                assert node.name not in out, node.name
                out[node.name] = node
    return out


def all_ascend_imports() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in SOURCES:
        out.update(ascend_imports(tree(path)))
    return out


def linearize(
    cls: ast.ClassDef, classes: dict[str, ast.ClassDef], imports: dict[str, str]
) -> tuple[dict[str, tuple[str, ast.FunctionDef]], list[str]]:
    """The methods AFD's classes give ``cls`` (first definition along the
    bases, left to right, wins, as in these single-chain mixins) and the
    vllm-ascend bases under them."""
    methods: dict[str, tuple[str, ast.FunctionDef]] = {}
    ascend: list[str] = []

    def visit(node: ast.ClassDef) -> None:
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                methods.setdefault(item.name, (node.name, item))
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else None
            if name in classes:
                visit(classes[name])
            elif name in imports:
                ascend.append(imports[name])

    visit(cls)
    return methods, ascend


def concrete_ascend_classes() -> list[str]:
    classes, imports = afd_classes(), all_ascend_imports()
    return [
        name
        for path in SOURCES[:4]
        for node in tree(path).body
        if isinstance(node, ast.ClassDef)
        and not node.name.startswith("_")
        and "Mixin" not in node.name
        and (name := node.name)
        and linearize(classes[name], classes, imports)[1]
    ]


def test_the_runtime_defines_the_four_role_classes_and_the_v2_ffn_runner() -> None:
    assert sorted(concrete_ascend_classes()) == [
        "AFDAttentionNPUModelRunner",
        "AFDAttentionNPUWorker",
        "AFDFFNNPUModelRunner",
        "AFDFFNNPUModelRunnerV2",
        "AFDFFNNPUWorker",
    ]


@pytest.mark.parametrize("name", concrete_ascend_classes())
def test_every_override_matches_a_recorded_vllm_ascend_method(name: str) -> None:
    """Each method AFD's classes (its own, the Ascend helpers and the shared
    role mixins) put over a vllm-ascend base: when that base defines it, it is
    recorded and ours accepts its parameters; otherwise the base inherits it
    from vLLM (checked against vLLM in tests/runtime/test_patch_targets.py)."""
    classes, imports = afd_classes(), all_ascend_imports()
    methods, bases = linearize(classes[name], classes, imports)
    assert len(bases) == 1, bases
    [base] = bases
    defined = MANIFEST["classes"][base]
    checked = []
    for method, (owner, node) in methods.items():
        if method.startswith(("afd_", "_afd")):
            continue
        key = f"{base}.{method}"
        if key not in API:
            assert method not in defined["methods"], (
                f"{owner}.{method} overrides {base}.{method} "
                f"({defined['file']}), which the manifest does not record: add "
                f"it to TARGETS in scripts/vllm_ascend_api.py"
            )
            continue
        theirs = API[key]
        why = accepts(node, theirs)
        where = f"{theirs['file']}:{theirs['line']}"
        assert why is None, f"{owner}.{method} {why} ({where})"
        checked.append(method)
    assert "__init__" in checked  # the role classes are built as vllm-ascend's


def test_the_v2_runner_overrides_of_vllm_methods_are_inherited_there() -> None:
    """The V2 FFN runner overrides load_model, get_model, _dummy_run and
    capture_model, which vllm-ascend's V2 runner takes from vLLM's own V2
    runner: the manifest says so, so a vllm-ascend commit that starts
    defining them fails the test above."""
    v2 = MANIFEST["classes"]["vllm_ascend.worker.v2.model_runner:NPUModelRunner"]
    assert v2["bases"] == ["GPUModelRunner"]
    for method in ("load_model", "get_model", "_dummy_run", "capture_model"):
        assert method not in v2["methods"], method
    assert "initialize_kv_cache" in v2["methods"]


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
