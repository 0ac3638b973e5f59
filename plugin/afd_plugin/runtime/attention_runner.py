# SPDX-License-Identifier: Apache-2.0
"""Platform-neutral half of the attention role's model runner: after loading,
the rendezvous; at the start of every step, the control payloads (one per
micro-batch stage) and the metadata.

Mixed into each platform's runner (``runtime/cpu/model_runners.py`` on CPU,
``runtime/gpu/`` on CUDA). A step begins at one entry per runner:
``AFDStepEntry``, which wraps the runner's model callable (vLLM's graph and
micro-batch wrappers included), so every model call, dummy runs too, begins
its step outside any graph. Model runner V2 replays full graphs without
calling the model; there the replay path (``patches/v2_run_fullgraph.py``) is
the entry of replayed steps, and the model call of every other step. The
model's forward pre-hook only installs each micro-batch thread's metadata.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from vllm.forward_context import get_forward_context, is_forward_context_available

from afd_plugin import metrics as afd_metrics
from afd_plugin import step_timing
from afd_plugin.evidence import format_dual_ubatch
from afd_plugin.models import micro_batch
from afd_plugin.models.forward_metadata import AFDForwardMetadata, install_metadata
from afd_plugin.runtime.role import AFDRoleRunnerMixin
from afd_plugin.step_kind import MARKED_KINDS, StepKind, resolve_step_kind
from afd_plugin.step_protocol import (
    block_token_counts,
    dual_ubatch_tokens,
    stage_payloads,
)

if TYPE_CHECKING:
    from torch import nn
    from vllm.config import VllmConfig

    from afd_plugin.wire import AFDControlPayload

logger = logging.getLogger("afd_plugin")
_CLOCK = step_timing.clock("attention")


class AFDStepEntry:
    """Wraps the runner's model callable (vLLM's graph or micro-batch wrapper
    included): every call first begins the AFD step, outside any graph, so a
    replayed graph, whose Python never runs, still gets its control payload.
    Attribute access falls through to the wrapped callable."""

    def __init__(self, runnable: Any, begin: Callable[[int], None]) -> None:
        self.runnable = runnable
        self._begin = begin

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        positions = kwargs["positions"] if "positions" in kwargs else args[1]
        with _CLOCK.part("model"):
            self._begin(int(positions.shape[-1]))
            return self.runnable(*args, **kwargs)

    def __getattr__(self, key: str) -> Any:
        return getattr(self.__dict__["runnable"], key)

    def unwrap(self) -> Any:
        """The model vLLM wrapped (as vLLM's own wrappers answer)."""
        inner = self.runnable
        return inner.unwrap() if hasattr(inner, "unwrap") else inner


class AFDAttentionRunnerMixin(AFDRoleRunnerMixin):
    """State and hooks the attention runner adds to vLLM's runner."""

    afd_role = "attention"
    vllm_config: VllmConfig
    model: Any
    _afd_step_kind: StepKind = StepKind.EAGER
    _afd_capturing: bool = False
    _afd_payloads: tuple[AFDControlPayload, ...] = ()
    _afd_steps: int = 0

    def afd_finish_load(self, model: nn.Module) -> None:
        """Call at the very end of ``load_model`` (AFD-I3), after any graph or
        micro-batch wrapper. ``model`` is the role model vLLM loaded;
        ``self.model``, what the runner calls (the role model or vLLM's wrapper
        of it), becomes the step entry. A forward of ``model`` in a micro-batch
        thread installs its stage's metadata. Then the rendezvous."""
        self.model = AFDStepEntry(self.model, self.afd_begin_step)
        model.register_forward_pre_hook(self._afd_pre_forward, with_kwargs=True)
        self.afd_connector.bind(model.afd_spec)
        self.afd_connector.init_afd_connector()

    @contextmanager
    def afd_step_kind(self, kind: StepKind) -> Iterator[None]:
        """Mark the forwards inside as profile or warm-up steps; an enclosing
        profile or warm-up keeps its kind."""
        if kind not in MARKED_KINDS:
            allowed = sorted(k.value for k in MARKED_KINDS)
            raise ValueError(f"step kind must be one of {allowed}, got {kind!r}")
        saved = self._afd_step_kind
        if saved is StepKind.EAGER:
            self._afd_step_kind = kind
        try:
            yield
        finally:
            self._afd_step_kind = saved

    @contextmanager
    def afd_capturing(self) -> Iterator[None]:
        """vLLM captures graphs inside: graph steps are captures, not replays."""
        saved, self._afd_capturing = self._afd_capturing, True
        try:
            yield
        finally:
            self._afd_capturing = saved

    # Step kinds of vLLM's own forwards (every platform's runner has these).
    # A dummy batch outside warm-up and profiling (an idle DP rank keeping
    # step with its peers) is a plain step, or a replay in graph mode.

    def profile_run(self, *args: Any, **kwargs: Any) -> None:
        with self.afd_step_kind(StepKind.PROFILE):
            super().profile_run(*args, **kwargs)  # type: ignore[misc]

    def _dummy_run(self, *args: Any, **kwargs: Any) -> Any:
        kind = StepKind.PROFILE if kwargs.get("is_profile") else self._afd_step_kind
        with self.afd_step_kind(kind):
            return super()._dummy_run(*args, **kwargs)  # type: ignore[misc]

    # The runner's share of a step (AFD_STEP_TIMING): execute_model and
    # sample_tokens, and the engine loop between one step and the next.

    _afd_step_ended: float | None = None

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        call = super().execute_model  # type: ignore[misc]
        try:
            if not _CLOCK.enabled:
                return call(*args, **kwargs)
            return self._afd_timed_runner_call(call, args, kwargs, step_starts=True)
        except afd_metrics.EXCHANGE_ERRORS as exc:
            # The step's exchange failed: vLLM's engine ends with it.
            afd_metrics.count_failure("attention", self.afd_connector.rank, exc)
            raise

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        call = super().sample_tokens  # type: ignore[misc]
        if not _CLOCK.enabled:
            return call(*args, **kwargs)
        return self._afd_timed_runner_call(call, args, kwargs, step_starts=False)

    def _afd_timed_runner_call(
        self,
        call: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        step_starts: bool,
    ) -> Any:
        started = time.perf_counter()
        if self._afd_step_ended is not None:
            gap = started - self._afd_step_ended
            if gap < step_timing.IDLE_GAP_S:  # else the engine was idle
                _CLOCK.add("between", gap)
        if step_starts:
            _CLOCK.step(started)
        try:
            return call(*args, **kwargs)
        finally:
            self._afd_step_ended = time.perf_counter()
            _CLOCK.add("runner_total", self._afd_step_ended - started)

    def get_model(self) -> nn.Module:
        model = self.model
        if isinstance(model, AFDStepEntry):
            return model.unwrap()
        return super().get_model()  # type: ignore[misc]

    # -- platform hooks -------------------------------------------------------

    def _afd_runs_graph(self) -> bool:
        """Whether vLLM runs the current step as a full graph (capture or
        replay). CPU: never."""
        return False

    def _afd_ubatch_sizes(self) -> list[int] | None:
        """Token count of each micro-batch of the current step, or None when
        vLLM did not split it. Read from the forward context."""
        slices = getattr(get_forward_context(), "ubatch_slices", None)
        if not slices:
            return None
        return [s.num_tokens for s in slices]

    def _afd_request_starts(self, num_tokens: int) -> tuple[int, ...]:
        """Token offset of each request of the step vLLM prepared (its query
        start locations); empty when the runner has none (a dummy run's are
        whatever the last step left, and only ever inside ``num_tokens``)."""
        input_batch = getattr(self, "input_batch", None)
        starts = getattr(self, "query_start_loc", None)
        if input_batch is None or starts is None:
            return ()
        values = starts.np[: input_batch.num_reqs + 1].tolist()
        return tuple(int(v) for v in values if 0 <= v <= num_tokens)

    # -- the step -------------------------------------------------------------

    def _afd_block(self) -> range:
        """The attention ranks whose counts this rank announces: its FFN
        rank's group, in the connector's own mapping."""
        return self.afd_connector.block

    def _afd_counts(self, num_tokens: int) -> tuple[int, ...]:
        dp_counts = None
        if is_forward_context_available():
            dp_metadata = get_forward_context().dp_metadata
            if dp_metadata is not None:
                dp_counts = dp_metadata.num_tokens_across_dp_cpu.tolist()
        tp_size = self.vllm_config.parallel_config.tensor_parallel_size
        return block_token_counts(num_tokens, dp_counts, tp_size, self._afd_block())

    def afd_plan_step(
        self, num_tokens: int, ubatch_sizes: list[int] | None, runs_graph: bool
    ) -> tuple[AFDControlPayload, ...]:
        """The payloads of one step, one per stage agreed at rendezvous. A
        split step announces this rank's micro-batches at its own entry of the
        block (the others' entries 0: each rank splits its own step; vLLM's
        CUDA DBO pads them alike, its CPU counterpart does not)."""
        connector = self.afd_connector
        spec = connector.spec
        stages = spec.stages if spec is not None else 1
        if connector.control_plane is None:
            # AFD-I2: no DP-metadata coordination; each dispatch carries its
            # own token count, so the payload only records this rank's step.
            stage_counts = [(num_tokens,)]
        elif ubatch_sizes:
            # Each rank announces its own micro-batches; its FFN rank takes
            # every rank's own entry (step_protocol.merge_block_payloads).
            block = self._afd_block()
            own = block.index(connector.rank)
            stage_counts = [
                tuple(n if i == own else 0 for i in range(len(block)))
                for n in ubatch_sizes
            ]
        else:
            stage_counts = [self._afd_counts(num_tokens)]
        kind = resolve_step_kind(self._afd_step_kind, runs_graph, self._afd_capturing)
        sizes = [max(c) for c in stage_counts] if kind.is_graph else None
        return stage_payloads(stage_counts, kind, stages, sizes)

    def afd_begin_step(self, num_tokens: int) -> None:
        """Announce the step and install its metadata; called once per step by
        the runner's entry, outside any graph (a capture records none of it)."""
        ubatches = self._afd_ubatch_sizes() if is_forward_context_available() else None
        payloads = self.afd_plan_step(num_tokens, ubatches, self._afd_runs_graph())
        self.afd_connector.note_step_requests(self._afd_request_starts(num_tokens))
        self.afd_announce(payloads)

    def afd_announce(self, payloads: tuple[AFDControlPayload, ...]) -> None:
        connector = self.afd_connector
        # AFD-I2: the only branch between the two drivers. Without a control
        # plane the connector carries the token metadata with the data.
        if connector.control_plane is not None:
            with _CLOCK.part("announce"):
                for payload in payloads:
                    connector.control_plane.send_dp_metadata_list(payload)
        self._afd_payloads = payloads
        self._afd_steps += 1
        afd_metrics.count_micro_batches("attention", connector.rank, len(payloads))
        if is_forward_context_available():
            install_metadata(AFDForwardMetadata(connector, 0, payloads[0]))
        tokens = dual_ubatch_tokens(payloads)
        if tokens is not None:
            logger.info(
                "%s",
                format_dual_ubatch(
                    "attention", connector.rank, self._afd_steps, tokens
                ),
            )

    def _afd_pre_forward(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        ubatch = micro_batch.current_ubatch()
        if ubatch is not None:
            # A micro-batch thread has its own forward context; the step began
            # at the runner's entry with one payload per stage.
            payload = self._afd_payloads[ubatch]
            install_metadata(AFDForwardMetadata(self.afd_connector, ubatch, payload))
        return None
