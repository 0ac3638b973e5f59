# SPDX-License-Identifier: Apache-2.0
"""The CUDA graph backend of the FFN graph cache: ``torch.cuda.CUDAGraph``
recorded with ``torch.cuda.graph(...)`` in one memory pool per FFN runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class CudaGraphBackend:
    """Records one callable per graph on ``device``; all graphs share a pool
    (the FFN side replays one at a time)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()

    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        graph = torch.cuda.CUDAGraph()
        # Everything queued before (static input fills) completes first.
        torch.cuda.synchronize(self.device)
        with torch.cuda.graph(graph, pool=self.pool):
            output = fn()
        return graph, output

    def replay(self, graph: Any) -> None:
        graph.replay()
