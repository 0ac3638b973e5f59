# SPDX-License-Identifier: Apache-2.0
"""Control-payload codec: canonical round trip, strict decoding, bounded input."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afd_plugin.step_kind import StepKind
from afd_plugin.wire import (
    FIELDS,
    MAX_PAYLOAD_BYTES,
    AFDControlPayload,
    AFDWireError,
    check_length,
    decode_payload,
    encode_payload,
)


@st.composite
def payloads(draw: st.DrawFn) -> AFDControlPayload:
    counts = tuple(draw(st.lists(st.integers(0, 1 << 20), min_size=1, max_size=64)))
    return AFDControlPayload.of_kind(
        draw(st.sampled_from(list(StepKind))),
        draw(st.integers(0, 65535)),
        counts,
        max(counts) + draw(st.integers(0, 1024)),
    )


@given(payloads())
def test_round_trip(payload: AFDControlPayload) -> None:
    data = encode_payload(payload)
    assert decode_payload(data) == payload
    assert decode_payload(bytearray(data)) == payload
    assert decode_payload(memoryview(data)) == payload


@given(payloads())
def test_encoding_is_canonical(payload: AFDControlPayload) -> None:
    data = encode_payload(payload)
    assert (
        data
        == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    )
    assert b" " not in data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=2048))
def test_garbage_bytes_raise_only_the_codec_error(data: bytes) -> None:
    with contextlib.suppress(AFDWireError):
        decode_payload(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([*FIELDS, "extra"]), json_values))
def test_garbage_json_objects_raise_only_the_codec_error(obj: dict) -> None:
    data = json.dumps(obj).encode()
    try:
        decoded = decode_payload(data)
    except AFDWireError:
        return
    assert encode_payload(decoded)  # anything accepted is a valid payload


def valid() -> dict:
    return {
        "stage_key": 0,
        "token_counts": [3, 5],
        "max_count": 5,
        "is_graph": False,
        "is_warmup": False,
        "is_profile": False,
    }


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"extra": 1}, "unknown ['extra']"),
        ({"stage_key": None}, "stage_key"),
        ({"stage_key": True}, "stage_key"),
        ({"stage_key": 1.0}, "stage_key"),
        ({"token_counts": [1, True]}, "token_counts"),
        ({"token_counts": []}, "token_counts"),
        ({"token_counts": [-1]}, "token_counts"),
        ({"token_counts": "12"}, "token_counts"),
        ({"max_count": 4}, "below the largest token count 5"),
        ({"is_graph": 1}, "is_graph"),
        ({"is_profile": "true"}, "is_profile"),
    ],
)
def test_wrong_types_and_bounds_are_refused(change: dict, needle: str) -> None:
    obj = {**valid(), **change}
    with pytest.raises(AFDWireError, match=None) as info:
        decode_payload(json.dumps(obj).encode())
    assert needle in str(info.value)


def test_missing_field_is_refused() -> None:
    obj = valid()
    del obj["is_warmup"]
    with pytest.raises(AFDWireError, match=r"missing \['is_warmup'\]"):
        decode_payload(json.dumps(obj).encode())


@pytest.mark.parametrize(
    "data", [b"[1,2]", b"\xff\xfe", b"{", b'{"stage_key": NaN}', b""]
)
def test_malformed_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(AFDWireError):
        decode_payload(data)


def test_oversize_length_is_refused_before_reading() -> None:
    with pytest.raises(AFDWireError, match="length"):
        check_length(MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(AFDWireError):
        check_length(0)
    with pytest.raises(AFDWireError):
        decode_payload(b" " * (MAX_PAYLOAD_BYTES + 1))


def test_constructor_validates() -> None:
    with pytest.raises(AFDWireError, match="max_count"):
        AFDControlPayload(stage_key=0, token_counts=(9,), max_count=1)
    p = AFDControlPayload(stage_key=1, token_counts=(2, 3), max_count=8, is_graph=True)
    assert p.total_tokens == 5


def test_never_pickles() -> None:
    data = encode_payload(
        AFDControlPayload(stage_key=0, token_counts=(1,), max_count=1)
    )
    assert data.startswith(b"{") and b"\x80" not in data


@pytest.mark.parametrize("kind", list(StepKind))
def test_each_step_kind_has_one_flag_pattern_on_the_wire(kind: StepKind) -> None:
    payload = AFDControlPayload.of_kind(kind, 0, (2,), 2)
    obj = json.loads(encode_payload(payload))
    assert (obj["is_graph"], obj["is_warmup"], obj["is_profile"]) == kind.flags
    assert decode_payload(encode_payload(payload)).kind is kind


@pytest.mark.parametrize(
    "flags",
    [
        {"is_graph": True, "is_profile": True},
        {"is_warmup": True, "is_profile": True},
        {"is_graph": True, "is_warmup": True, "is_profile": True},
    ],
)
def test_flags_that_name_no_step_kind_are_refused(flags: dict[str, bool]) -> None:
    """No attention side sends these; a decoder that took them would have to
    guess which branch to run."""
    obj = {
        "stage_key": 0,
        "token_counts": [2],
        "max_count": 2,
        "is_graph": False,
        "is_warmup": False,
        "is_profile": False,
        **flags,
    }
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(AFDWireError, match="name no step kind"):
        decode_payload(data)
