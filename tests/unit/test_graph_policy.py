# SPDX-License-Identifier: Apache-2.0
"""FFN graph key: only graph steps, stable per shape, distinct across shapes."""

from __future__ import annotations

import pytest

from afd_plugin.graph_policy import allowed_graph_modes, make_ffn_graph_key
from afd_plugin.wire import AFDControlPayload


def payload(**kw) -> AFDControlPayload:
    base = {"stage_key": 0, "token_counts": (3, 4), "max_count": 8, "is_graph": True}
    return AFDControlPayload(**{**base, **kw})


def test_same_shape_same_key_regardless_of_actual_counts() -> None:
    assert make_ffn_graph_key(payload()) == make_ffn_graph_key(
        payload(token_counts=(8, 1))
    )


@pytest.mark.parametrize(
    "change", [{"stage_key": 1}, {"max_count": 16}, {"token_counts": (1, 2, 3)}]
)
def test_shape_or_stage_changes_the_key(change: dict) -> None:
    assert make_ffn_graph_key(payload()) != make_ffn_graph_key(payload(**change))


@pytest.mark.parametrize("kw", [{"is_graph": False}, {"is_profile": True}])
def test_non_graph_steps_have_no_key(kw: dict) -> None:
    with pytest.raises(ValueError):
        make_ffn_graph_key(payload(**kw))


def test_connectors_without_control_plane_are_eager_only() -> None:
    for platform, runner in [("cuda", "v1"), ("npu", "v1"), ("npu", "v2")]:
        assert allowed_graph_modes(platform, runner, has_control_plane=False) == (
            "eager",
        )
    assert "FULL" not in allowed_graph_modes("cuda", "v2", True)
    assert "FULL" in allowed_graph_modes("npu", "v2", True)
    assert allowed_graph_modes("cpu", "v2", True) == ()
