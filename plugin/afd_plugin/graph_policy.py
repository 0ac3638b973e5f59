# SPDX-License-Identifier: Apache-2.0
"""Graph-mode rules per platform and runner, and the FFN graph-cache key.

Pure (AFD-I4): the harness and both roles ask the same questions here.
"""

from __future__ import annotations

from typing import Literal, get_args

from afd_plugin.wire import AFDControlPayload

GraphMode = Literal[
    "eager", "FULL_DECODE_ONLY", "FULL", "PIECEWISE", "FULL_AND_PIECEWISE"
]
GRAPH_MODES: tuple[str, ...] = get_args(GraphMode)

# (platform, model runner) -> graph modes AFD supports there (AFD-I8).
_ALLOWED: dict[tuple[str, str], tuple[str, ...]] = {
    ("cpu", "v1"): ("eager",),
    ("cuda", "v1"): ("eager", "FULL_DECODE_ONLY"),
    ("cuda", "v2"): ("eager", "FULL_DECODE_ONLY"),
    ("npu", "v1"): ("eager", "FULL_DECODE_ONLY"),
    ("npu", "v2"): ("eager", "FULL_DECODE_ONLY", "FULL"),
}


def allowed_graph_modes(
    platform: str, model_runner: str, has_control_plane: bool
) -> tuple[str, ...]:
    """Graph modes a deployment may use; connectors without a control plane
    are eager-only because the FFN graph key needs the step's metadata."""
    modes = _ALLOWED.get((platform, model_runner), ())
    if not has_control_plane:
        return tuple(m for m in modes if m == "eager")
    return modes


def validate_cuda_graph_mode(
    graph_mode: str, platform: str, model_runner: str, has_control_plane: bool
) -> str | None:
    """None when allowed, else a message naming the allowed modes."""
    allowed = allowed_graph_modes(platform, model_runner, has_control_plane)
    if graph_mode in allowed:
        return None
    why = "" if has_control_plane else " (connector has no control plane)"
    return (
        f"graph mode {graph_mode!r} is not supported on {platform} model runner "
        f"{model_runner}{why}; allowed: {', '.join(allowed) or 'none'}"
    )


FFNGraphKey = tuple[int, int, int]


def make_ffn_graph_key(payload: AFDControlPayload) -> FFNGraphKey:
    """Cache key of the FFN graph serving this step: (stage, ranks, padded count).

    Only graph steps have a key; eager, warm-up and profile steps never hit the
    graph cache.
    """
    if not payload.is_graph:
        raise ValueError("make_ffn_graph_key: payload is not a graph step")
    if payload.is_profile:
        raise ValueError("make_ffn_graph_key: a profile step never uses a graph")
    return (payload.stage_key, len(payload.token_counts), payload.max_count)
