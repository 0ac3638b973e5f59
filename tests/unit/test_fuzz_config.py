# SPDX-License-Identifier: Apache-2.0
"""Fuzzing of ``parse_afd_config``: every ``additional_config`` a user writes.

Owns the property that any value (not a mapping, no ``afd`` section, an
``afd`` section of any type or JSON text, sections built from the real field
names, aliases and each connector's ``connector_extra_config`` fields with
random values) gives an ``AFDConfig``, ``None`` or an ``AFDConfigError`` whose
every error names an ``additional_config`` path, quickly; and that an accepted
config parses back from its own dump. The hand-written cases are in
test_config.py.
"""

from __future__ import annotations

import json
import math
import time
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic.fields import FieldInfo

from afd_plugin.config import (
    ALIASES,
    ALLOWED_CONNECTORS,
    FIELD_NAMES,
    AFDConfig,
    parse_afd_config,
)
from afd_plugin.connectors.registry import AFDConnectorFactory
from afd_plugin.errors import AFDConfigError, FieldError

# One example parses in about a millisecond; a second is a hang or a blow-up.
FAST = settings(max_examples=250, deadline=1000)

MAX_MESSAGE = 1000
"""An error message says what is wrong in a line or two (the longest, an
unknown field's list of allowed fields, is ~300 characters); a longer one
echoes user input into the server's log."""

# Integers up to Python's int<->str limit (4300 digits); longer ones have
# their own test below.
HUGE_INTS = st.sampled_from(
    [2**31, 2**63, -(2**63) - 1, 2**64, 10**100, -(10**100), 10**4299]
)
INTS = st.integers() | HUGE_INTS
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
# Long strings, bounded per example (64 KiB) so that a run stays bounded.
LONG_TEXT = st.builds(
    lambda ch, n: ch * n, st.characters(codec="utf-8"), st.integers(256, 1 << 16)
)
WORDS = st.sampled_from(
    [
        "afd",
        "",
        *FIELD_NAMES,
        *ALIASES,
        *ALLOWED_CONNECTORS,
        "attention",
        "ffn",
        "auto",
        "gloo",
        "shm",
        "nccl",
        "host",
        "ascend",
        "reference",
        "request",
        "\x00",
        "\u202e",
        "\U0001f600",
    ]
)
TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | WORDS | LONG_TEXT
SCALARS = st.none() | st.booleans() | INTS | FLOATS | TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=12) | WORDS, inner, max_size=4)
    ),
    max_leaves=16,
)


def _constraint(info: FieldInfo, name: str) -> Any:
    for item in info.metadata:
        value = getattr(item, name, None)
        if value is not None:
            return value
    return None


def _typed(annotation: Any, info: FieldInfo) -> st.SearchStrategy[Any]:
    """Values of the field's own type, at and around its bounds: the inputs
    most likely to parse, so that the accepted path is fuzzed too."""
    origin = get_origin(annotation)
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if origin in (Union, types.UnionType):
        return st.one_of([_typed(arg, info) for arg in get_args(annotation)])
    if annotation is type(None):
        return st.none()
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        lo, hi = _constraint(info, "ge"), _constraint(info, "le")
        edges = [v + d for v in (lo, hi) if v is not None for d in (-1, 0, 1)]
        return st.integers(lo, hi) | st.sampled_from(edges or [0])
    if annotation is float:
        return st.floats(0, 1e6) | st.sampled_from([0.0, -0.0, 1e-300, math.inf])
    if annotation is str:
        pattern = _constraint(info, "pattern")
        if pattern is not None:
            return st.from_regex(pattern, fullmatch=True)
        size = _constraint(info, "max_length") or 64
        return st.text(min_size=_constraint(info, "min_length") or 0, max_size=size)
    return JSON_VALUES


def _schema_fields(connector: str) -> dict[str, FieldInfo]:
    return dict(AFDConnectorFactory.get_spec(connector).schema_class().model_fields)


@st.composite
def extra_configs(draw: st.DrawFn, connector: str, noise: bool) -> dict[str, Any]:
    """A ``connector_extra_config`` of ``connector``'s own field names."""
    fields = _schema_fields(connector)
    names = list(fields) + (["unknown_field", "transport "] if noise else [])
    out: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=5)):
        info = fields.get(name)
        typed = _typed(info.annotation, info) if info is not None else st.nothing()
        out[name] = draw(typed | JSON_VALUES if noise else typed)
    return out


@st.composite
def afd_sections(draw: st.DrawFn, noise: bool = True) -> dict[str, Any]:
    """An ``afd`` section of the real field names and aliases. With ``noise``
    any field may hold any JSON value; without, the values are of the field's
    type (most of these sections parse)."""
    fields = AFDConfig.model_fields
    connector = draw(st.sampled_from(ALLOWED_CONNECTORS))
    names = [n for n in FIELD_NAMES if n not in ("role", "connector")]
    names += list(ALIASES)
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=6))
    # role and connector (or their aliases) are required: usually present.
    for required in ("role", "connector"):
        if draw(st.integers(0, 9)) > 0:
            chosen.append(required)
    out: dict[str, Any] = {}
    for name in chosen:
        canonical = ALIASES.get(name, name)
        info = fields[canonical]
        if canonical == "connector":
            value = draw(
                st.just(connector) | JSON_VALUES if noise else st.just(connector)
            )
        elif canonical == "connector_extra_config":
            value = draw(extra_configs(connector, noise))
        else:
            typed = _typed(info.annotation, info)
            value = draw(typed | JSON_VALUES if noise else typed)
        out[name] = value
    if noise and draw(st.booleans()):
        out[draw(st.text(max_size=12) | WORDS)] = draw(JSON_VALUES)
    return out


def _check_parse(additional: Any) -> AFDConfig | None:
    """Parse; the only exception allowed is ``AFDConfigError`` with located,
    non-empty, bounded errors (any other exception propagates and fails)."""
    try:
        config = parse_afd_config(additional)
    except AFDConfigError as exc:
        assert exc.errors, "an AFDConfigError must carry at least one error"
        for err in exc.errors:
            assert isinstance(err, FieldError)
            assert isinstance(err.path, str)
            assert err.path.startswith("additional_config"), err
            assert isinstance(err.message, str) and err.message.strip(), err
            assert len(err.message) <= MAX_MESSAGE, err.message[:200]
        assert str(exc)
        return None
    assert config is None or isinstance(config, AFDConfig)
    return config


# Catches: a caller's additional_config that is not a mapping (vLLM types it
# `dict | SupportsHash`) reaching `"afd" in x` / `x["afd"]` and raising
# TypeError instead of AFDConfigError (or None).
@FAST
@given(JSON_VALUES)
@example(0)
@example("afd")
@example(["afd"])
def test_any_additional_config_value(additional: Any) -> None:
    _check_parse(additional)


# Catches: an `afd` section of the wrong type (a list, a number, bytes, bad
# JSON text) raising anything but AFDConfigError, and a mapping without `afd`
# not meaning "AFD off".
@FAST
@given(JSON_VALUES | st.binary(max_size=64))
def test_afd_section_of_any_type(section: Any) -> None:
    _check_parse({"afd": section})
    other = {"not_afd": section}
    assert parse_afd_config(other) is None


# Catches: any field, alias or connector_extra_config value of a real name
# that escapes the typed error (a TypeError from comparing a list with a bound,
# a RecursionError from nesting, an error path outside additional_config, a
# message echoing a 64 KiB string).
@FAST
@given(afd_sections())
def test_sections_of_real_field_names(section: dict[str, Any]) -> None:
    _check_parse({"afd": section})


# Catches: the JSON-text form of the section (`"afd": "<json>"`) raising
# json's own errors instead of AFDConfigError (integers past the str limit
# and deep nesting have their own tests below).
@FAST
@given(
    afd_sections().map(json.dumps)
    | st.text(alphabet='{}[]":,0123456789.-eE tnrufalsNIiy', max_size=200)
    | st.text(max_size=200)
    | st.builds(lambda n: '{"port": ' + "9" * n + "}", st.integers(1, 4300))
)
def test_sections_as_json_text(text: str) -> None:
    _check_parse({"afd": text})


# Catches: JSON text nested deeper than the recursion limit raising
# RecursionError from json.loads. Not a hypothesis test on purpose: hypothesis
# raises the recursion limit while a test runs, which hides exactly this.
@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"a":' * 100_000],
    ids=["deep-array", "deep-object"],
)
def test_deeply_nested_json_text(text: str) -> None:
    start = time.perf_counter()
    _check_parse({"afd": text})
    assert time.perf_counter() - start < 1.0


# Catches: a long integer in any field echoed whole into the error message
# (the bound errors use repr(), not describe()), and one beyond Python's
# int<->str limit (4300 digits) raising ValueError instead of AFDConfigError:
# from that repr() when the section is a dict, from json.loads when it is JSON
# text (json raises a plain ValueError there, not a JSONDecodeError).
@FAST
@given(
    st.sampled_from(FIELD_NAMES + tuple(ALIASES) + ("extra:shm_ring_bytes",)),
    st.integers(1000, 6000),
    st.booleans(),
    st.booleans(),
)
@example("port", 1000, False, False)
@example("port", 4301, True, False)
@example("port", 4301, False, True)
def test_long_integers(
    name: str, digits: int, negative: bool, as_json_text: bool
) -> None:
    if as_json_text:
        number = ("-" if negative else "") + "9" * digits
        _check_parse({"afd": '{"' + name + '": ' + number + "}"})
        return
    value = (1 - 10**digits) if negative else (10**digits - 1)  # no str round
    section: dict[str, Any] = {"role": "attention", "connector": "P2pGlooAFDConnector"}
    if name.startswith("extra:"):
        section["connector_extra_config"] = {name.split(":", 1)[1]: value}
    else:
        section.pop(ALIASES.get(name, name), None)
        section[name] = value
    _check_parse({"afd": section})


def _round_trips(config: AFDConfig) -> None:
    dumped = config.to_additional_config()
    for again in (
        dumped,
        json.loads(json.dumps(dumped)),
        {"afd": json.loads(config.model_dump_json())},
        {"afd": config.model_dump()},
        {"afd": config.model_dump_json()},
    ):
        parsed = parse_afd_config(again)
        assert parsed == config, again
        assert parsed.extra == config.extra


# Catches: a config that parses but whose own dump does not parse back to an
# equal config (aliases dumped under their alias, a value the JSON dump
# changes, e.g. inf dumped as null, or an extra config lost on the way).
@FAST
@given(afd_sections(noise=False))
@example(
    {
        "role": "attention",
        "connector": "P2pGlooAFDConnector",
        "connector_extra_config": {"peer_timeout_s": math.inf},
    }
)
def test_accepted_config_parses_back_from_its_dump(section: dict[str, Any]) -> None:
    config = _check_parse({"afd": section})
    if config is None:
        return
    assert isinstance(config, AFDConfig)
    for name, value in section.items():  # aliases land on their canonical field
        canonical = ALIASES.get(name, name)
        if canonical != "connector_extra_config" and not (
            isinstance(value, float) and math.isnan(value)
        ):
            assert getattr(config, canonical) == value
    _round_trips(config)


def test_generated_sections_do_parse_sometimes() -> None:
    """Guards the strategy itself: if no typed section ever parsed, the round
    trip above would pass vacuously."""
    parsed = 0

    @settings(max_examples=100, deadline=None, database=None)
    @given(afd_sections(noise=False))
    def count(section: Mapping[str, Any]) -> None:
        nonlocal parsed
        parsed += _check_parse({"afd": section}) is not None

    count()
    assert parsed >= 10
