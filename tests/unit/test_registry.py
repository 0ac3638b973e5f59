# SPDX-License-Identifier: Apache-2.0
"""Connector registry: whitelist, factory, README table and closed schemas agree;
an implemented connector's loader names a class its module defines."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from afd_plugin.config import ALLOWED_CONNECTORS
from afd_plugin.connectors.registry import AFDConnectorFactory, ConnectorSpec
from afd_plugin.errors import AFDConfigError

ROOT = Path(__file__).resolve().parents[2]


def readme_connectors() -> list[str]:
    text = (ROOT / "docs" / "connectors.md").read_text()
    block = text.split("afd-e2e:begin connectors", 1)[1].split(
        "afd-e2e:end connectors"
    )[0]
    return re.findall(r"^\| `(\w+)` \|", block, re.M)


def test_whitelist_registry_and_readme_agree() -> None:
    assert set(ALLOWED_CONNECTORS) == set(AFDConnectorFactory.names())
    assert readme_connectors() == list(AFDConnectorFactory.names())


@pytest.mark.parametrize("spec", AFDConnectorFactory.specs(), ids=lambda s: s.name)
def test_an_implemented_loader_names_a_class_of_its_module(spec: ConnectorSpec) -> None:
    """Read without importing (the module imports torch): the class the
    registry would load is defined there, and ``implemented`` says whether the
    module is in this build."""
    module, _, cls = spec.loader.partition(":")
    path = ROOT / "plugin" / (module.replace(".", "/") + ".py")
    assert spec.implemented == path.is_file()
    if spec.implemented:
        tree = ast.parse(path.read_text())
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        assert cls in classes, f"{path} defines {sorted(classes)}, not {cls}"
    assert spec.schema_class().__name__ == spec.schema.partition(":")[2]


def test_registration_outside_the_backend_package_is_refused() -> None:
    spec = ConnectorSpec(
        name="X",
        platform="cuda",
        loader="afd_plugin.connectors.npu.x:X",
        schema="afd_plugin.connectors.gpu.schema:P2pNcclExtraConfig",
        has_control_plane=True,
        synchronous=True,
        stages="decode",
    )
    with pytest.raises(ValueError, match="must live in afd_plugin.connectors.gpu"):
        AFDConnectorFactory._register(spec)
    assert "X" not in AFDConnectorFactory.names()


def test_duplicate_registration_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        AFDConnectorFactory._register(
            AFDConnectorFactory.get_spec("CAMP2pAFDConnector")
        )


@pytest.mark.parametrize("name", AFDConnectorFactory.names())
def test_schemas_are_closed(name: str) -> None:
    with pytest.raises(AFDConfigError) as info:
        AFDConnectorFactory.parse_extra_config(name, {"surely_unknown": 1})
    assert info.value.paths == (
        "additional_config.afd.connector_extra_config.surely_unknown",
    )


@pytest.mark.parametrize("name", AFDConnectorFactory.names())
def test_schemas_accept_empty_and_document_every_field(name: str) -> None:
    parsed = AFDConnectorFactory.parse_extra_config(name, None)
    for field_name, field in type(parsed).model_fields.items():
        assert field.description, f"{name}.{field_name} has no docstring"


def test_extra_config_types_are_strict() -> None:
    with pytest.raises(AFDConfigError) as info:
        AFDConnectorFactory.parse_extra_config(
            "CAMP2pAFDConnector", {"max_num_tokens_per_rank": 8.0}
        )
    assert "must be an integer" in str(info.value)


def test_unknown_connector_lists_registered_names() -> None:
    with pytest.raises(AFDConfigError, match="P2pNcclAFDConnector"):
        AFDConnectorFactory.parse_extra_config("Nope", {})


def test_factory_holds_loader_strings_and_imports_nothing() -> None:
    code = (
        "import sys\n"
        "from afd_plugin.connectors.registry import AFDConnectorFactory\n"
        "for s in AFDConnectorFactory.specs(): s.implemented\n"
        "bad = [m for m in sys.modules if m.startswith('afd_plugin.connectors.')"
        " and not m.endswith(('.registry', '.schema', '.extra_config'))"
        " and m.count('.') > 2]\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_unimplemented_connector_fails_clearly_on_load() -> None:
    for spec in AFDConnectorFactory.specs():
        if not spec.implemented:
            with pytest.raises(NotImplementedError, match=spec.name):
                spec.load_class()
