# SPDX-License-Identifier: Apache-2.0
"""The FFN graph cache: per graph key (``graph_policy.make_ffn_graph_key``) and
layer, one captured graph of the layer's block over static input buffers.

Pure: the graph itself comes from a ``GraphBackend`` (CUDA graphs in
``runtime/gpu/graphs.py``, a recording fake in tests). Only compute is ever
captured: receiving the step's payload, updating the connector state and
moving data all happen outside ``capture`` (AFD-I10), so a graph replays the
same work whatever transport the connector uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from afd_plugin.graph_policy import FFNGraphKey
from afd_plugin.wire import AFDWireError


class GraphBackend(Protocol):
    """Records and replays one callable."""

    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        """Record ``fn``; return the graph and what ``fn`` returned (its
        outputs live in static memory that every replay rewrites)."""
        ...

    def replay(self, graph: Any) -> None: ...


@dataclass
class LayerGraph:
    """One captured layer: static inputs to fill, the graph, its output."""

    inputs: dict[str, Any]
    graph: Any
    output: Any


def describe_key(key: FFNGraphKey) -> str:
    stage, ranks, max_count = key
    return f"(stage={stage}, ranks={ranks}, max_count={max_count})"


class FFNGraphCache:
    """Captured FFN graphs by (graph key, layer)."""

    def __init__(self, backend: GraphBackend) -> None:
        self.backend = backend
        self._graphs: dict[FFNGraphKey, dict[int, LayerGraph]] = {}

    def capture(
        self,
        key: FFNGraphKey,
        layer: int,
        inputs: dict[str, Any],
        compute: Callable[[dict[str, Any]], Any],
    ) -> None:
        """Record ``compute(inputs)``; a key captured again is replaced (vLLM
        captures once to size graph memory, clears, and captures again)."""
        graph, output = self.backend.capture(lambda: compute(inputs))
        self._graphs.setdefault(key, {})[layer] = LayerGraph(inputs, graph, output)

    def has(self, key: FFNGraphKey) -> bool:
        return key in self._graphs

    def captured_keys(self) -> tuple[FFNGraphKey, ...]:
        return tuple(sorted(self._graphs))

    def require(self, keys: Iterable[FFNGraphKey]) -> None:
        """A replay step is served only when every key it needs was captured."""
        missing = [k for k in keys if k not in self._graphs]
        if missing:
            captured = (
                ", ".join(describe_key(k) for k in self.captured_keys()) or "none"
            )
            raise AFDWireError(
                "the attention side replays a graph step but the FFN side has no "
                f"captured graph for key {describe_key(missing[0])} (captured: "
                f"{captured}); both roles must capture the same graph sizes "
                "(same --compilation-config cudagraph sizes and --enable-dbo)"
            )

    def replay(
        self, key: FFNGraphKey, layer: int, fill: Callable[[dict[str, Any]], None]
    ) -> Any:
        """Fill the static inputs, replay, return the static output."""
        self.require([key])
        entry = self._graphs[key].get(layer)
        if entry is None:
            raise AFDWireError(
                f"FFN graph {describe_key(key)} has no layer {layer}; captured "
                f"layers: {sorted(self._graphs[key])}"
            )
        fill(entry.inputs)
        self.backend.replay(entry.graph)
        return entry.output

    def clear(self) -> None:
        self._graphs.clear()
