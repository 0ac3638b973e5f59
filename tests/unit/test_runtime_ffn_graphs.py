# SPDX-License-Identifier: Apache-2.0
"""The FFN graph cache with a recording backend: capture records only the
compute, a recapture replaces, replay fills the static inputs first, a
missing key or layer is a clear error.
"""

from __future__ import annotations

from typing import Any

import pytest

from afd_plugin.runtime.ffn_graphs import FFNGraphCache
from afd_plugin.wire import AFDWireError


class Backend:
    def __init__(self) -> None:
        self.captured: list[Any] = []
        self.replayed: list[Any] = []

    def capture(self, fn: Any) -> tuple[Any, Any]:
        graph = len(self.captured)
        self.captured.append(graph)
        return graph, fn()

    def replay(self, graph: Any) -> None:
        self.replayed.append(graph)


def test_capture_then_replay_returns_the_static_output() -> None:
    backend = Backend()
    cache = FFNGraphCache(backend)
    out = {"value": None}
    cache.capture((0, 2, 8), 3, {"hidden": [0]}, lambda x: out)
    filled: list[Any] = []
    result = cache.replay((0, 2, 8), 3, lambda inputs: filled.append(inputs))
    assert result is out and filled == [{"hidden": [0]}]
    assert backend.replayed == [0] and cache.captured_keys() == ((0, 2, 8),)


def test_recapture_replaces_the_graph() -> None:
    backend = Backend()
    cache = FFNGraphCache(backend)
    cache.capture((0, 1, 4), 0, {}, lambda _: "first")
    cache.capture((0, 1, 4), 0, {}, lambda _: "second")
    assert cache.replay((0, 1, 4), 0, lambda _: None) == "second"
    assert backend.replayed == [1]


def test_missing_key_and_layer_are_named() -> None:
    cache = FFNGraphCache(Backend())
    cache.capture((0, 1, 4), 0, {}, lambda _: None)
    with pytest.raises(AFDWireError, match=r"\(stage=1, ranks=1, max_count=4\)"):
        cache.require([(0, 1, 4), (1, 1, 4)])
    with pytest.raises(AFDWireError, match="has no layer 5"):
        cache.replay((0, 1, 4), 5, lambda _: None)
    cache.clear()
    assert not cache.has((0, 1, 4))
