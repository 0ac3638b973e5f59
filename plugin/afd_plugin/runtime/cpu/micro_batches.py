# SPDX-License-Identifier: Apache-2.0
"""Two micro-batches on the CPU: the attention role's ping-pong.

vLLM's DBO needs CUDA streams and is turned off on the CPU; this is its CPU
counterpart, without streams or events. The runner (``model_runners.py``)
lets vLLM split a decode step (its ubatch slices, one attention metadata per
micro-batch); ``CPUMicroBatchModel`` then runs each micro-batch's forward in
its own thread with its own forward context, one thread at a time. A
micro-batch hands the turn over after each layer's send (``RemoteFFN`` ->
``models/micro_batch.yield_turn``), so while the FFN role computes one
micro-batch's layer, this process runs the other's attention.

The threads live as long as the model (no thread start per step) and run
under inference mode, as vLLM's forward does.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch
from vllm import forward_context as vllm_forward_context
from vllm.config import CUDAGraphMode, VllmConfig
from vllm.forward_context import (
    ForwardContext,
    create_forward_context,
    get_forward_context,
    override_forward_context,
)

from afd_plugin.models.micro_batch import set_turn

Job = Callable[[], Any]


class HandOff:
    """The turn among the micro-batches of one step: exactly one thread runs;
    a thread that yields wakes the next unfinished micro-batch and sleeps
    until its own turn comes back; each resumes with its forward context."""

    def __init__(self, contexts: list[ForwardContext]) -> None:
        self.contexts = contexts
        self._wake = [threading.Event() for _ in contexts]
        self._finished = [False] * len(contexts)
        self.all_done = threading.Event()

    def start(self) -> None:
        self._wake[0].set()

    def wait_turn(self, ubatch: int) -> None:
        self._wake[ubatch].wait()
        self._wake[ubatch].clear()
        vllm_forward_context._forward_context = self.contexts[ubatch]

    def _next(self, ubatch: int) -> int | None:
        n = len(self.contexts)
        for step in range(1, n):
            other = (ubatch + step) % n
            if not self._finished[other]:
                return other
        return None

    def yield_from(self, ubatch: int) -> None:
        other = self._next(ubatch)
        if other is None:
            return  # the others are done: keep running
        self._wake[other].set()
        self.wait_turn(ubatch)

    def finish(self, ubatch: int) -> None:
        self._finished[ubatch] = True
        vllm_forward_context._forward_context = None
        other = self._next(ubatch)
        if other is None:
            self.all_done.set()
        else:
            self._wake[other].set()


class _Turn:
    """One micro-batch thread's turn (``models.micro_batch.MicroBatchTurn``)."""

    def __init__(self, hand_off: HandOff, ubatch: int) -> None:
        self.hand_off = hand_off
        self.ubatch = ubatch

    def yield_turn(self) -> None:
        self.hand_off.yield_from(self.ubatch)


class MicroBatchThreads:
    """One long-lived thread per micro-batch, each running the jobs handed to
    it under inference mode; daemon threads, which end with the process (the
    model they serve lives as long)."""

    def __init__(self, count: int, name: str = "afd-ubatch") -> None:
        self._jobs: list[queue.SimpleQueue[Job]] = [
            queue.SimpleQueue() for _ in range(count)
        ]
        self._threads = [
            threading.Thread(
                target=self._serve, args=(q,), name=f"{name}-{i}", daemon=True
            )
            for i, q in enumerate(self._jobs)
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[Job]) -> None:
        with torch.inference_mode():
            while True:
                jobs.get()()

    def submit(self, ubatch: int, job: Job) -> None:
        self._jobs[ubatch].put(job)


TOKEN_INPUTS = ("input_ids", "positions", "inputs_embeds")
"""Model inputs with one row per token of the step (sliced per micro-batch)."""


def _slice_input(name: str, value: Any, tokens: slice) -> Any:
    if value is None or name not in TOKEN_INPUTS:
        return value
    if name == "positions" and value.ndim == 2:
        return value[:, tokens]  # M-RoPE positions: (sections, tokens)
    return value[tokens]


class CPUMicroBatchModel:
    """Wraps the attention role model: a call inside a forward context that
    carries ubatch slices runs the micro-batches interleaved and returns their
    hidden states concatenated; any other call runs the model as it is."""

    def __init__(self, runnable: Any, vllm_config: VllmConfig, count: int) -> None:
        self.runnable = runnable
        self.vllm_config = vllm_config
        self.count = count
        self._threads: MicroBatchThreads | None = None

    def unwrap(self) -> Any:
        return self.runnable

    def __getattr__(self, key: str) -> Any:
        return getattr(self.__dict__["runnable"], key)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        parent = get_forward_context()
        slices = parent.ubatch_slices
        if not slices:
            return self.runnable(*args, **kwargs)
        if args:
            raise TypeError("the AFD CPU micro-batch wrapper takes keyword inputs")
        if len(slices) != self.count:
            raise RuntimeError(
                f"vLLM split the step into {len(slices)} micro-batches; the AFD "
                f"deployment agreed on {self.count}"
            )
        contexts = [
            self._context(parent, i, s.token_slice) for i, s in enumerate(slices)
        ]
        hand_off = HandOff(contexts)
        results: list[Any] = [None] * len(slices)
        errors: list[BaseException | None] = [None] * len(slices)
        threads = self._threads_or_start()
        for i, ubatch_slice in enumerate(slices):
            tokens = ubatch_slice.token_slice
            inputs = {k: _slice_input(k, v, tokens) for k, v in kwargs.items()}
            threads.submit(i, self._job(hand_off, i, inputs, results, errors))
        with override_forward_context(None):
            hand_off.start()
            hand_off.all_done.wait()
        for error in errors:
            if error is not None:
                raise error
        return torch.cat(results, dim=0)

    def _job(
        self,
        hand_off: HandOff,
        ubatch: int,
        inputs: dict[str, Any],
        results: list[Any],
        errors: list[BaseException | None],
    ) -> Job:
        def run() -> None:
            hand_off.wait_turn(ubatch)
            set_turn(_Turn(hand_off, ubatch))
            try:
                results[ubatch] = self.runnable(**inputs)
            except BaseException as exc:  # reported by the calling thread
                errors[ubatch] = exc
            finally:
                set_turn(None)
                hand_off.finish(ubatch)

        return run

    def _context(
        self, parent: ForwardContext, ubatch: int, tokens: slice
    ) -> ForwardContext:
        slot_mapping = parent.slot_mapping
        return create_forward_context(
            parent.attn_metadata[ubatch],
            self.vllm_config,
            dp_metadata=None,
            cudagraph_runtime_mode=CUDAGraphMode.NONE,
            batch_descriptor=parent.batch_descriptor,
            slot_mapping=slot_mapping[ubatch]
            if isinstance(slot_mapping, list)
            else None,
            additional_kwargs=dict(parent.additional_kwargs),
            is_padding=parent.is_padding[tokens]
            if parent.is_padding is not None
            else None,
        )

    def _threads_or_start(self) -> MicroBatchThreads:
        if self._threads is None:
            self._threads = MicroBatchThreads(self.count)
        return self._threads
