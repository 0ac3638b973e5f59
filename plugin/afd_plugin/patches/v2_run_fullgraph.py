# SPDX-License-Identifier: Apache-2.0
"""Patch: ``run_fullgraph`` of one model runner V2 graph manager
(``vllm.v1.worker.gpu.cudagraph_utils.ModelCudaGraphManager``, vLLM 0.32.0).

What: wraps the bound method on the attention runner's own manager instance
so that a callback (the AFD step entry) runs before vLLM replays a FULL graph.
Why: model runner V2 replays FULL graphs through its graph manager without
calling the model, so no model-level entry sees a replayed step; the FFN side
must still get that step's control payload, sent outside the graph.
vLLM version: 0.32.0 (``check_target`` fails when the method or its
parameters changed).
Delete when: vLLM's V2 runner offers a hook before a full-graph replay.
Applied: per instance, by ``runtime/gpu/model_runners_v2.py`` after the KV
cache (and with it the manager) exists; never at ``register()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

TARGET = "vllm.v1.worker.gpu.cudagraph_utils:ModelCudaGraphManager.run_fullgraph"
EXPECTED_PARAMETERS = ("self", "desc")


def check_target() -> None:
    """Raise when the installed vLLM renamed or reshaped the target."""
    from vllm import __version__ as vllm_version
    from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager

    method = getattr(ModelCudaGraphManager, "run_fullgraph", None)
    found = None if method is None else tuple(inspect.signature(method).parameters)
    if found != EXPECTED_PARAMETERS:
        raise RuntimeError(
            f"vLLM {vllm_version}: {TARGET} takes {found}, expected "
            f"{EXPECTED_PARAMETERS}; afd_plugin.patches.v2_run_fullgraph needs an "
            "update"
        )


def announce_before_replay(manager: Any, before: Callable[[Any], None]) -> None:
    """Make ``manager.run_fullgraph(desc)`` call ``before(desc)`` first, outside
    the graph (the replayed Python never runs)."""
    replay = manager.run_fullgraph

    def run_fullgraph(desc: Any) -> Any:
        before(desc)
        return replay(desc)

    manager.run_fullgraph = run_fullgraph
