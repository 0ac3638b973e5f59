"""The attention side's step entry against a fake connector: the dummy-batch
path (vLLM calling the model directly) installs the metadata lazily and still
sends its payload; the runner-level entry announces a step once, also when a
graph replay never runs the model; micro-batch threads install their stage's
metadata without sending; two non-empty micro-batches leave evidence.

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
from afd_plugin.evidence import parse_line
from afd_plugin.runtime import attention_runner
from afd_plugin.runtime.attention_runner import AFDAttentionRunnerMixin, AFDStepEntry
from afd_plugin.runtime.metadata import current_metadata
from afd_plugin.wire import AFDControlPayload


class Recorder(AFDControlPlane):
    def __init__(self, connector: FakeConnector) -> None:
        self.connector = connector

    def send_dp_metadata_list(self, payload: AFDControlPayload) -> None:
        self.connector.update_state_from_dp_metadata(payload)
        self.connector.sent.append(payload)

    def recv_dp_metadata_list(self) -> AFDControlPayload:
        raise AssertionError("attention never receives payloads")


class FakeConnector(AFDConnector):
    def __init__(self, control_plane: bool = True) -> None:
        super().__init__(
            AFDConfig(role="attention", connector="P2pNcclAFDConnector"), 0, None
        )
        self.sent: list[AFDControlPayload] = []
        self.updates: list[AFDControlPayload] = []
        self.initialised = False
        if control_plane:
            self.control_plane = Recorder(self)

    def init_afd_connector(self) -> None:
        self.initialised = True

    def update_state_from_dp_metadata(self, payload: AFDControlPayload) -> None:
        self.updates.append(payload)

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


def setup(stages: int = 1, **kw: Any) -> tuple[Runner, Model, FakeConnector]:
    connector = FakeConnector(kw.pop("control_plane", True))
    runner = Runner(connector, **kw)
    model = Model(stages)
    runner.afd_finish_load(model)
    assert connector.initialised and connector.spec is model.afd_spec
    return runner, model, connector


def tokens(n: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.zeros(n, dtype=torch.long), "positions": torch.arange(n)}


def test_dummy_batch_path_installs_metadata_lazily_and_still_sends() -> None:
    runner, model, connector = setup()
    # What vLLM's _dummy_run does: its own forward context, then the model.
    with set_forward_context(None, runner.vllm_config, num_tokens=1):
        model(**tokens(1))
    assert [(p.token_counts, p.is_graph) for p in connector.sent] == [((1,), False)]
    assert model.seen == [(0, connector.sent[0])]
    # The state was updated before the payload left (AFD-I10).
    assert connector.updates == connector.sent


def test_runner_entry_announces_once_even_when_the_model_runs_too() -> None:
    runner, model, connector = setup()
    entry = AFDStepEntry(model, runner.afd_begin_step)
    with set_forward_context(None, runner.vllm_config, num_tokens=3):
        entry(**tokens(3))
    assert len(connector.sent) == 1 and len(model.seen) == 1
    assert entry.unwrap() is model and entry.afd_spec is model.afd_spec


def test_replayed_graph_still_announces_a_replay_step() -> None:
    runner, model, connector = setup(runs_graph=True)
    entry = AFDStepEntry(lambda **_: None, runner.afd_begin_step)  # graph replay
    with set_forward_context(None, runner.vllm_config, num_tokens=8):
        entry(**tokens(8))
    (sent,) = connector.sent
    assert (sent.is_graph, sent.is_warmup, sent.max_count) == (True, False, 8)
    assert model.seen == []


def test_capture_is_announced_as_capture() -> None:
    runner, model, connector = setup(runs_graph=True)
    with (
        runner.afd_step_kind("warmup"),
        runner.afd_capturing(),
        set_forward_context(None, runner.vllm_config, num_tokens=4),
    ):
        AFDStepEntry(model, runner.afd_begin_step)(**tokens(4))
    (sent,) = connector.sent
    assert (sent.is_graph, sent.is_warmup, sent.max_count) == (True, True, 4)


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
    monkeypatch.setattr(attention_runner, "current_ubatch", lambda: 1)
    with set_forward_context(None, runner.vllm_config, num_tokens=2):
        model(**tokens(2))
    assert len(connector.sent) == 2
    assert model.seen == [(1, connector.sent[1])]
    records = [r for r in map(parse_line, caplog.messages) if r is not None]
    assert [(r.role, r.tokens) for r in records] == [("attention", (3, 2))]


def test_unsplit_step_with_dbo_sends_an_empty_second_stage() -> None:
    runner, model, connector = setup(stages=2)
    with set_forward_context(None, runner.vllm_config, num_tokens=4):
        model(**tokens(4))
    assert [(p.stage_key, p.token_counts) for p in connector.sent] == [
        (0, (4,)),
        (1, (0,)),
    ]


def test_without_control_plane_nothing_is_sent_but_metadata_is_installed() -> None:
    runner, model, connector = setup(control_plane=False)
    with set_forward_context(None, runner.vllm_config, num_tokens=2):
        model(**tokens(2))
    assert connector.sent == [] and len(model.seen) == 1
