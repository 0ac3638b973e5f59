# SPDX-License-Identifier: Apache-2.0
"""Which micro-batch this thread runs, and how it hands the turn to the other.

Two drivers run a step as micro-batch threads: vLLM's DBO on CUDA
(``vllm.v1.worker.ubatching``) and the plugin's CPU micro-batches
(``runtime/cpu/micro_batches.py``), which has no streams. The role models ask
here and never care which one runs them; the CPU driver registers each of its
threads' turn with ``set_turn``. Imports point down: runtime -> models.
"""

from __future__ import annotations

import threading
from typing import Protocol


class MicroBatchTurn(Protocol):
    """One micro-batch thread's place in the hand-off."""

    @property
    def ubatch(self) -> int: ...

    def yield_turn(self) -> None:
        """Let the other micro-batch run until it hands the turn back."""
        ...


_local = threading.local()


def set_turn(turn: MicroBatchTurn | None) -> None:
    """Register (or clear) the calling thread's turn (the CPU driver)."""
    _local.turn = turn


def _turn() -> MicroBatchTurn | None:
    return getattr(_local, "turn", None)


def current_ubatch() -> int | None:
    """The micro-batch this thread runs, or None outside micro-batching."""
    turn = _turn()
    if turn is not None:
        return turn.ubatch
    from vllm.v1.worker.ubatching import dbo_current_ubatch_id, dbo_enabled

    return dbo_current_ubatch_id() if dbo_enabled() else None


def yield_turn() -> None:
    """Hand the turn to the other micro-batch (no-op outside micro-batching):
    called after a layer's send, so the other micro-batch sends its layer
    before this one waits for its FFN output."""
    turn = _turn()
    if turn is not None:
        turn.yield_turn()
        return
    from vllm.v1.worker.ubatching import dbo_enabled, dbo_yield

    if dbo_enabled():
        dbo_yield()
