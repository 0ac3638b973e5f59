# SPDX-License-Identifier: Apache-2.0
"""The attention side's one step entry against a fake connector: every call of
the runner's model (dummy runs included) announces one step, also when a graph
replay never runs the model; a forward past the entry fails loudly;
micro-batch threads install their stage's metadata without sending; two
non-empty micro-batches leave evidence; the real control plane updates local
state before it sends.

Needs vLLM's forward context (tox env e2e); no server, no GPU.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.forward_context import set_forward_context
from vllm.v1.worker.ubatch_utils import UBatchSlice

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import (
    AFDConnector,
    AFDControlPlane,
    ExchangeSpec,
    LayerExchange,
)
from afd_plugin.connectors.cpu.p2p_gloo import P2pGlooAFDConnector
from afd_plugin.evidence import parse_line
from afd_plugin.models import micro_batch
from afd_plugin.models.forward_metadata import current_metadata
from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin, AFDStepEntry
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import step_payload
from afd_plugin.wire import AFDControlPayload


class Recorder(AFDControlPlane):
    """Records what the runner sends; does nothing else."""

    def __init__(self) -> None:
        self.sent: list[AFDControlPayload] = []

    def send_dp_metadata_list(self, payload: AFDControlPayload) -> None:
        self.sent.append(payload)

    def recv_dp_metadata_list(self) -> AFDControlPayload:
        raise AssertionError("attention never receives payloads")


class FakeConnector(AFDConnector):
    def __init__(self, control_plane: bool = True) -> None:
        super().__init__(
            AFDConfig(role="attention", connector="P2pNcclAFDConnector"), 0
        )
        self.recorder = Recorder()
        self.initialised = False
        if control_plane:
            self.control_plane = self.recorder

    @property
    def sent(self) -> list[AFDControlPayload]:
        return self.recorder.sent

    def init_afd_connector(self) -> None:
        self.initialised = True

    def update_state_from_dp_metadata(self, payload: AFDControlPayload) -> None: ...

    def send_attn_output(self, *a: Any, **k: Any) -> None: ...

    def recv_ffn_output(self, *a: Any) -> Any: ...

    def recv_attn_output(self, *a: Any) -> Any: ...

    def send_ffn_output(self, *a: Any) -> None: ...

    def close(self) -> None: ...


class Model(nn.Module):
    """Stands in for the attention role model: reads the step metadata."""

    def __init__(self, stages: int) -> None:
        super().__init__()
        self.afd_spec = ExchangeSpec(
            8, "float32", "float32", (LayerExchange(0),), stages
        )
        self.seen: list[tuple[int, AFDControlPayload]] = []

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        metadata = current_metadata()
        self.seen.append((metadata.stage, metadata.payload))
        return positions


class Runner(AFDAttentionRunnerMixin):
    def __init__(self, connector: FakeConnector, runs_graph: bool = False) -> None:
        self.vllm_config = VllmConfig()
        self.afd_connector = connector
        self.runs_graph = runs_graph

    def _afd_runs_graph(self) -> bool:
        return self.runs_graph


def setup(
    stages: int = 1, runnable: Any = None, **kw: Any
) -> tuple[Runner, Model, FakeConnector]:
    """A runner whose ``model`` (what vLLM calls) is the role model, or
    ``runnable`` standing for vLLM's graph wrapper of it."""
    connector = FakeConnector(kw.pop("control_plane", True))
    runner = Runner(connector, **kw)
    model = Model(stages)
    runner.model = model if runnable is None else runnable
    runner.afd_finish_load(model)
    assert connector.initialised and connector.spec is model.afd_spec
    assert isinstance(runner.model, AFDStepEntry)
    return runner, model, connector


def tokens(n: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.zeros(n, dtype=torch.long), "positions": torch.arange(n)}


def test_every_call_of_the_runner_model_begins_one_step() -> None:
    """vLLM's forwards (steps and dummy runs alike) call ``runner.model``:
    each call announces one step, and the model sees that step's payload."""
    runner, model, connector = setup()
    for n in (3, 1):
        with set_forward_context(None, runner.vllm_config, num_tokens=n):
            runner.model(**tokens(n))
    assert [(p.token_counts, p.kind) for p in connector.sent] == [
        ((3,), StepKind.EAGER),
        ((1,), StepKind.EAGER),
    ]
    assert model.seen == [(0, connector.sent[0]), (0, connector.sent[1])]
    assert runner.get_model() is model and runner.model.afd_spec is model.afd_spec


def test_a_forward_past_the_entry_is_a_loud_runner_bug() -> None:
    """There is one door: a model call that did not go through the runner's
    entry has no step, and the model says so instead of guessing one."""
    runner, model, connector = setup()
    with (
        set_forward_context(None, runner.vllm_config, num_tokens=2),
        pytest.raises(RuntimeError, match="did not install this step's metadata"),
    ):
        model(**tokens(2))
    assert connector.sent == []


def test_replayed_graph_still_announces_a_replay_step() -> None:
    runner, model, connector = setup(runs_graph=True, runnable=lambda **_: None)
    with set_forward_context(None, runner.vllm_config, num_tokens=8):
        runner.model(**tokens(8))  # a graph replay: the model's Python never runs
    (sent,) = connector.sent
    assert (sent.kind, sent.max_count) == (StepKind.REPLAY, 8)
    assert model.seen == []


def test_capture_is_announced_as_capture() -> None:
    runner, model, connector = setup(runs_graph=True)
    with (
        runner.afd_step_kind(StepKind.WARMUP),
        runner.afd_capturing(),
        set_forward_context(None, runner.vllm_config, num_tokens=4),
    ):
        runner.model(**tokens(4))
    (sent,) = connector.sent
    assert (sent.kind, sent.max_count) == (StepKind.CAPTURE, 4)


def test_profile_marks_outlast_an_inner_warmup_mark() -> None:
    runner, model, connector = setup()
    with (
        runner.afd_step_kind(StepKind.PROFILE),
        runner.afd_step_kind(StepKind.WARMUP),
        set_forward_context(None, runner.vllm_config, num_tokens=2),
    ):
        runner.model(**tokens(2))
    assert [p.kind for p in connector.sent] == [StepKind.PROFILE]
    with (
        pytest.raises(ValueError, match="step kind must be one of"),
        runner.afd_step_kind(StepKind.REPLAY),
    ):
        pass


def test_micro_batches_announce_both_stages_and_install_each(
    monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    runner, model, connector = setup(stages=2)
    slices = [
        UBatchSlice(slice(0, 2), slice(0, 3)),
        UBatchSlice(slice(2, 4), slice(3, 5)),
    ]
    with (
        caplog.at_level(logging.INFO, logger="afd_plugin"),
        set_forward_context(
            None, runner.vllm_config, num_tokens=5, ubatch_slices=slices
        ),
    ):
        runner.afd_begin_step(5)
    assert [(p.stage_key, p.token_counts) for p in connector.sent] == [
        (0, (3,)),
        (1, (2,)),
    ]
    # A micro-batch thread: its own forward context, no second announcement.
    monkeypatch.setattr(micro_batch, "current_ubatch", lambda: 1)
    with set_forward_context(None, runner.vllm_config, num_tokens=2):
        model(**tokens(2))
    assert len(connector.sent) == 2
    assert model.seen == [(1, connector.sent[1])]
    records = [r for r in map(parse_line, caplog.messages) if r is not None]
    assert [(r.role, r.tokens) for r in records] == [("attention", (3, 2))]


def test_unsplit_step_with_dbo_sends_an_empty_second_stage() -> None:
    runner, model, connector = setup(stages=2)
    with set_forward_context(None, runner.vllm_config, num_tokens=4):
        runner.model(**tokens(4))
    assert [(p.stage_key, p.token_counts) for p in connector.sent] == [
        (0, (4,)),
        (1, (0,)),
    ]


def test_without_control_plane_nothing_is_sent_but_metadata_is_installed() -> None:
    runner, model, connector = setup(control_plane=False)
    with set_forward_context(None, runner.vllm_config, num_tokens=2):
        runner.model(**tokens(2))
    assert connector.sent == [] and len(model.seen) == 1


class WireStub:
    """The gloo world of a real connector, reduced to recording each send with
    the connector's state at that moment."""

    connected = True

    def __init__(self, connector: P2pGlooAFDConnector) -> None:
        self.connector = connector
        self.sends: list[tuple[int, AFDControlPayload | None]] = []

    def send(self, tensor: torch.Tensor, dst: int, tag: int, what: str) -> None:
        state = self.connector.states.get(0)
        self.sends.append((tag, None if state is None else state.payload))


def test_the_control_plane_updates_local_state_before_it_sends() -> None:
    """AFD-I10 on the real control plane of the gloo connector: when the first
    byte of a payload leaves, this rank already runs that payload."""
    config = AFDConfig(role="attention", connector="P2pGlooAFDConnector")
    connector = P2pGlooAFDConnector(config, 0)
    connector.bind(ExchangeSpec(8, "float32", "float32", (LayerExchange(0),)))
    stub = WireStub(connector)
    connector.world = stub  # type: ignore[assignment]
    payload = step_payload((5,), StepKind.EAGER)
    assert connector.control_plane is not None
    connector.control_plane.send_dp_metadata_list(payload)
    assert stub.sends and all(seen == payload for _, seen in stub.sends)
    assert connector.state is not None and connector.state.counts == (5,)
