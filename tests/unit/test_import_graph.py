# SPDX-License-Identifier: Apache-2.0
"""The plugin's import graph, read with ``ast`` (nothing is imported): imports
point down, runtime -> models -> connectors -> pure core, and patches sit
beside the runtime without importing it or the models.

Every import statement counts, lazy ones inside functions and type-only ones
alike: a layer that needs a name from above is in the wrong place.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugin" / "afd_plugin"
HARNESS = ROOT / "harness" / "afd_e2e"

# ARCHITECTURE's pure core, and the pure modules it is built from.
CORE = {
    "afd_plugin",
    "afd_plugin.config",
    "afd_plugin.validation",
    "afd_plugin.topology",
    "afd_plugin.wire",
    "afd_plugin.rendezvous_protocol",
    "afd_plugin.graph_policy",
    "afd_plugin.envs",
    "afd_plugin.connectors.registry",
    "afd_plugin.connectors.cpu.schema",
    "afd_plugin.connectors.gpu.schema",
    "afd_plugin.connectors.npu.schema",
    "afd_plugin.connectors.extra_config",
    "afd_plugin.errors",
    "afd_plugin.evidence",
    "afd_plugin.metrics_catalog",
    "afd_plugin.model_support",
    "afd_plugin.serving_features",
    "afd_plugin.step_kind",
    "afd_plugin.step_protocol",
    "afd_plugin.step_timing",
    "afd_plugin.version",
    "afd_plugin.worker_selection",
}
DEVICE_LIBRARIES = ("torch", "vllm", "torch_npu", "vllm_ascend")
# register(), the entry point in the top-level package, applies the patches
# (lazily, inside the function): the one import from the core upwards.
ENTRY_POINT_IMPORTS = {"afd_plugin": {"afd_plugin.patches"}}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def plugin_modules() -> dict[str, Path]:
    return {module_name(p, PLUGIN): p for p in sorted(PLUGIN.rglob("*.py"))}


@cache
def imports_of(path: Path, root: Path | None = None) -> frozenset[str]:
    """Every module an import statement of ``path`` (a module of the package
    at ``root``) names, relative ones resolved; ``from a import b`` names
    ``a`` and ``a.b``."""
    tree = ast.parse(path.read_text(), str(path))
    if root is None:
        root = PLUGIN if PLUGIN in path.parents else HARNESS
    package = module_name(path, root)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(found)


def layer(module: str) -> str:
    parts = module.split(".")
    return (
        parts[1]
        if len(parts) > 1 and parts[1] in ("connectors", "models", "runtime", "patches")
        else "core"
    )


def offenders(source_layer: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for name, path in plugin_modules().items():
        if layer(name) != source_layer:
            continue
        for target in sorted(imports_of(path)):
            if any(target == f or target.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(ROOT)} imports {target}")
    return out


def test_connectors_import_neither_runtime_nor_models_nor_patches() -> None:
    assert (
        offenders(
            "connectors",
            ("afd_plugin.runtime", "afd_plugin.models", "afd_plugin.patches"),
        )
        == []
    )


def test_models_do_not_import_the_runtime() -> None:
    """runtime -> models, never back."""
    assert offenders("models", ("afd_plugin.runtime",)) == []


def test_patches_import_neither_runtime_nor_models() -> None:
    """runtime -> patches (and models -> patches for the build-time swap),
    never back."""
    assert offenders("patches", ("afd_plugin.runtime", "afd_plugin.models")) == []


def test_the_runtime_is_imported_by_nothing_below_it() -> None:
    for source in ("core", "connectors", "models", "patches"):
        assert offenders(source, ("afd_plugin.runtime",)) == [], source


def test_the_pure_core_imports_only_the_pure_core() -> None:
    """No torch, vLLM or device library, not even lazily, and no plugin module
    outside the core."""
    modules = plugin_modules()
    assert set(modules) >= CORE, sorted(CORE - set(modules))
    problems = []
    for name in sorted(CORE):
        for target in sorted(imports_of(modules[name])):
            top = target.split(".")[0]
            if top in DEVICE_LIBRARIES:
                problems.append(f"{name} imports {target}")
            elif top == "afd_plugin" and target not in CORE:
                parent = target.rpartition(".")[0]
                allowed = ENTRY_POINT_IMPORTS.get(name, set())
                if parent not in CORE and not {target, parent} & allowed:
                    problems.append(f"{name} imports {target}")
    assert problems == []


@pytest.mark.parametrize(
    "path", sorted(HARNESS.rglob("*.py")), ids=lambda p: str(p.relative_to(HARNESS))
)
def test_the_harness_imports_only_the_plugins_pure_core(path: Path) -> None:
    plugin_imports = [t for t in imports_of(path) if t.split(".")[0] == "afd_plugin"]
    outside = [
        t for t in plugin_imports if t not in CORE and t.rpartition(".")[0] not in CORE
    ]
    assert outside == []


def test_the_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "afd_plugin"
    (package / "connectors").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "connectors" / "__init__.py").write_text("")
    sample = package / "connectors" / "x.py"
    sample.write_text(
        "from ..runtime import role\ndef f():\n    import afd_plugin.models.qwen3_moe\n"
    )
    found = imports_of(sample, package)
    assert {"afd_plugin.runtime", "afd_plugin.runtime.role"} <= found
    assert "afd_plugin.models.qwen3_moe" in found


ASCEND_MODULES = ("afd_plugin.runtime.npu", "afd_plugin.compat.npu")


def test_only_the_ascend_runtime_and_compat_layers_import_vllm_ascend() -> None:
    """The CUDA and CPU paths (registration, patches, workers) never import
    vllm-ascend or torch_npu, not even lazily: only ``runtime/npu`` and
    ``compat/npu`` do, and they run on an Ascend process only."""
    problems = []
    for name, path in plugin_modules().items():
        if name.startswith(ASCEND_MODULES):
            continue
        for target in sorted(imports_of(path)):
            if target.split(".")[0] in ("vllm_ascend", "torch_npu"):
                problems.append(f"{path.relative_to(ROOT)} imports {target}")
    assert problems == []
    ascend = [n for n in plugin_modules() if n.startswith(ASCEND_MODULES)]
    assert "afd_plugin.runtime.npu.model_runners" in ascend


def test_the_native_library_is_named_only_by_its_loader() -> None:
    """``afd_plugin._C_ascend`` is imported by ``ensure_cam_p2p_ops_available``
    at connector init only: no import statement anywhere names it, and the
    one module that spells its name is the ops module."""
    spelled = []
    for name, path in plugin_modules().items():
        assert not any("_C_ascend" in t for t in imports_of(path)), name
        if "_C_ascend" in path.read_text():
            spelled.append(name)
    assert "afd_plugin.connectors.npu.cam_p2p_ops" in spelled
    assert set(spelled) <= {
        "afd_plugin.connectors.npu.cam_p2p_ops",
        "afd_plugin.connectors.npu.schema",  # its docstring
        "afd_plugin.native_build",
    }, spelled


def enclosing_functions(path: Path, wanted: str) -> list[str]:
    """Names of the functions (innermost) whose bodies mention ``wanted`` as
    a name or an attribute; ``<module>`` for a mention outside any."""
    out: list[str] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name
            if (isinstance(child, ast.Name) and child.id == wanted) or (
                isinstance(child, ast.Attribute) and child.attr == wanted
            ):
                out.append(scope)
            visit(child, inner)

    visit(ast.parse(path.read_text()), "<module>")
    return out


def test_the_native_library_is_loaded_only_at_connector_init() -> None:
    """The one ``import_module`` of the native library runs inside
    ``ensure_cam_p2p_ops_available``, which only the CAM P2P connector's
    ``init_afd_connector`` calls (AFD-I3, AFD-I4)."""
    ops = PLUGIN / "connectors" / "npu" / "cam_p2p_ops.py"
    loads = [
        scope
        for scope in enclosing_functions(ops, "NATIVE_MODULE")
        if scope != "<module>"
    ]
    tree = ast.parse(ops.read_text())
    import_calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and getattr(n.func, "attr", None) == "import_module"
        and any(isinstance(a, ast.Name) and a.id == "NATIVE_MODULE" for a in n.args)
    ]
    assert len(import_calls) == 1
    assert "ensure_cam_p2p_ops_available" in loads
    assert set(enclosing_functions(ops, "import_module")) == {
        "ensure_cam_p2p_ops_available"
    }
    callers = {
        name: enclosing_functions(path, "ensure_cam_p2p_ops_available")
        for name, path in plugin_modules().items()
    }
    calls = {
        (name, scope)
        for name, scopes in callers.items()
        for scope in scopes
        if scope != "<module>"
    }
    assert calls == {("afd_plugin.connectors.npu.cam_p2p", "init_afd_connector")}, calls
