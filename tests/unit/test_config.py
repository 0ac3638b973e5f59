# SPDX-License-Identifier: Apache-2.0
"""parse_afd_config: aliases, strict types, closed schemas, all errors at once."""

from __future__ import annotations

import json

import pytest

from afd_plugin.config import ALIASES, AFDConfig, parse_afd_config
from afd_plugin.errors import AFDConfigError

BASE = {"role": "attention", "connector": "P2pGlooAFDConnector"}


def parse(**afd: object) -> AFDConfig:
    cfg = parse_afd_config({"afd": {**BASE, **afd}})
    assert cfg is not None
    return cfg


def errors_of(afd: object) -> AFDConfigError:
    with pytest.raises(AFDConfigError) as info:
        parse_afd_config({"afd": afd})
    return info.value


@pytest.mark.parametrize("additional", [None, {}, {"other_plugin": {"x": 1}}])
def test_absent_afd_section_means_afd_off(additional: dict | None) -> None:
    assert parse_afd_config(additional) is None


def test_defaults_and_canonical_fields() -> None:
    cfg = parse()
    assert cfg.role == "attention"
    assert (cfg.host, cfg.port) == ("127.0.0.1", 29650)
    assert (cfg.num_attention_ranks, cfg.num_ffn_ranks) == (1, 1)
    assert cfg.compute_gate_on_attention is False
    assert cfg.connector_extra_config == {}


def test_round_trips_through_additional_config() -> None:
    cfg = parse(
        port=6239, num_attention_ranks=2, connector_extra_config={"peer_timeout_s": 5}
    )
    again = parse_afd_config(json.loads(json.dumps(cfg.to_additional_config())))
    assert again == cfg


def test_json_string_section_is_accepted() -> None:
    cfg = parse_afd_config({"afd": json.dumps({**BASE, "port": 7000})})
    assert cfg is not None and cfg.port == 7000


@pytest.mark.parametrize(
    ("alias", "canonical", "value"),
    [
        ("afd_role", "role", "ffn"),
        ("afd_connector", "connector", "P2pNcclAFDConnector"),
        ("afd_host", "host", "10.0.0.2"),
        ("afd_port", "port", 4321),
    ],
)
def test_aliases_map_to_canonical_fields(
    alias: str, canonical: str, value: object
) -> None:
    raw = {k: v for k, v in BASE.items() if k != canonical}
    cfg = parse_afd_config({"afd": {**raw, alias: value}})
    assert getattr(cfg, canonical) == value


@pytest.mark.parametrize(("alias", "canonical"), sorted(ALIASES.items()))
def test_alias_and_canonical_together_is_an_error(alias: str, canonical: str) -> None:
    value = {"role": "ffn", "connector": "P2pGlooAFDConnector", "host": "h", "port": 1}
    err = errors_of({**BASE, canonical: value[canonical], alias: value[canonical]})
    assert f"additional_config.afd.{alias}" in err.paths
    assert f"keep only '{canonical}'" in str(err)


@pytest.mark.parametrize("bad", [6239.0, True, "6239", None])
def test_integers_never_come_from_floats_bools_or_strings(bad: object) -> None:
    err = errors_of({**BASE, "port": bad})
    assert err.paths == ("additional_config.afd.port",)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("port", 0),
        ("port", 65536),
        ("num_attention_ranks", 0),
        ("num_ffn_ranks", -1),
    ],
)
def test_bounds_name_the_field(field: str, value: int) -> None:
    err = errors_of({**BASE, field: value})
    assert err.paths == (f"additional_config.afd.{field}",)
    assert str(value) in str(err)


def test_role_error_lists_allowed_values() -> None:
    err = errors_of({**BASE, "role": "expert"})
    assert err.paths == ("additional_config.afd.role",)
    assert "'attention'" in str(err) and "'ffn'" in str(err)


def test_connector_not_in_whitelist_lists_allowed_names() -> None:
    err = errors_of({**BASE, "connector": "MyConnector"})
    assert err.paths == ("additional_config.afd.connector",)
    for name in (
        "P2pGlooAFDConnector",
        "P2pNcclAFDConnector",
        "CAMP2pAFDConnector",
        "CAMAsyncAFDConnector",
    ):
        assert name in str(err)


def test_unknown_field_lists_allowed_fields() -> None:
    err = errors_of({**BASE, "afd_config": "x.json"})
    assert err.paths == ("additional_config.afd.afd_config",)
    assert "allowed fields" in str(err) and "num_ffn_ranks" in str(err)


def test_missing_required_fields() -> None:
    err = errors_of({})
    assert set(err.paths) == {
        "additional_config.afd.role",
        "additional_config.afd.connector",
    }


def test_every_error_is_reported_at_once() -> None:
    err = errors_of(
        {
            "role": "both",
            "connector": "P2pGlooAFDConnector",
            "port": 1.5,
            "num_ffn_ranks": True,
            "bogus": 1,
            "connector_extra_config": {"peer_timeout_s": -1, "nccl": 1},
        }
    )
    assert set(err.paths) == {
        "additional_config.afd.role",
        "additional_config.afd.port",
        "additional_config.afd.num_ffn_ranks",
        "additional_config.afd.bogus",
        "additional_config.afd.connector_extra_config.peer_timeout_s",
        "additional_config.afd.connector_extra_config.nccl",
    }
    assert "6 problems" in str(err)
    assert isinstance(err, ValueError)


def test_extra_config_is_checked_by_the_connector_schema() -> None:
    err = errors_of({**BASE, "connector_extra_config": {"async_moe_ubatching": True}})
    assert err.paths == (
        "additional_config.afd.connector_extra_config.async_moe_ubatching",
    )
    assert "rendezvous_timeout_s" in str(err)  # the allowed fields are listed


@pytest.mark.parametrize("section", [[1, 2], "not json {", 3])
def test_section_must_be_a_mapping(section: object) -> None:
    err = errors_of(section)
    assert err.paths == ("additional_config.afd",)


def test_every_field_has_a_default_or_is_required_and_a_docstring() -> None:
    for name, field in AFDConfig.model_fields.items():
        assert field.description, f"AFDConfig.{name} has no docstring"


def test_config_is_frozen() -> None:
    cfg = parse()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError
        cfg.port = 1  # type: ignore[misc]


def test_the_extra_config_is_parsed_once_and_carried_typed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One parse of connector_extra_config per config: the validator (and the
    connector builder, tests/runtime) take the typed object."""
    from afd_plugin.connectors.cpu.schema import P2pGlooExtraConfig
    from afd_plugin.connectors.registry import AFDConnectorFactory
    from afd_plugin.validation import Deployment, check_deployment

    calls: list[str] = []
    original = AFDConnectorFactory.parse_extra_config.__func__

    def counting(cls, name, raw):
        calls.append(name)
        return original(cls, name, raw)

    monkeypatch.setattr(
        AFDConnectorFactory, "parse_extra_config", classmethod(counting)
    )
    config = parse_afd_config(
        {
            "afd": {
                "role": "ffn",
                "connector": "P2pGlooAFDConnector",
                "connector_extra_config": {"peer_timeout_s": 5},
            }
        }
    )
    assert config is not None
    assert isinstance(config.extra, P2pGlooExtraConfig)
    assert config.extra.peer_timeout_s == 5
    assert check_deployment(config, Deployment("cpu", "DeepseekV2ForCausalLM")) == []
    assert calls == ["P2pGlooAFDConnector"]
