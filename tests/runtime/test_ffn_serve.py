# SPDX-License-Identifier: Apache-2.0
"""One FFN step served against a fake connector with real tensors: eager and
replayed outputs agree, a capture moves no data, two micro-batches are served
in the attention side's interleaved order. A recording graph backend stands
in for CUDA graphs (it runs the captured callable again on replay).

Needs torch (tox env e2e); no vLLM server.
"""

from __future__ import annotations

from typing import Any

import torch

from afd_plugin.config import AFDConfig
from afd_plugin.connectors.base import AFDConnector, ExchangeSpec, LayerExchange
from afd_plugin.runtime.ffn_graphs import FFNGraphCache
from afd_plugin.runtime.ffn_serve import serve_ffn_step
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import stage_payloads, stage_rows

HIDDEN, EXPERTS = 4, 3
SPEC = ExchangeSpec(
    HIDDEN,
    "float32",
    "float32",
    (LayerExchange(0, "dense"), LayerExchange(1, "moe", EXPERTS)),
    stages=2,
)


class ReplayingBackend:
    """Captures by remembering the callable; a replay calls it again, so the
    static output changes only through the static inputs, as on a GPU."""

    def __init__(self) -> None:
        self.captures = 0
        self.replays = 0

    def capture(self, fn: Any) -> tuple[Any, Any]:
        self.captures += 1
        out = fn()
        return (fn, out), out

    def replay(self, graph: Any) -> None:
        self.replays += 1
        fn, out = graph
        out.copy_(fn())


class FakeConnector(AFDConnector):
    """Hands out deterministic inputs per (layer, stage) and records outputs."""

    def __init__(self, payloads: tuple[Any, ...]) -> None:
        super().__init__(AFDConfig(role="ffn", connector="P2pNcclAFDConnector"), 0)
        self.spec = SPEC
        self.payloads = {p.stage_key: p for p in payloads}
        self.calls: list[tuple[str, int, int]] = []
        self.outputs: dict[tuple[int, int], torch.Tensor] = {}

    def init_afd_connector(self) -> None: ...

    def update_state_from_dp_metadata(self, payload: Any) -> None: ...

    def send_attn_output(self, *a: Any, **k: Any) -> None: ...

    def recv_ffn_output(self, *a: Any) -> Any: ...

    def recv_attn_output(self, layer: int, stage: int) -> Any:
        self.calls.append(("recv", layer, stage))
        rows = sum(stage_rows(self.payloads[stage]))
        gen = torch.Generator().manual_seed(layer * 10 + stage)
        hidden = torch.randn(rows, HIDDEN, generator=gen)
        extras = {}
        if SPEC.layer(layer).router_logits:
            extras["router_logits"] = torch.randn(rows, EXPERTS, generator=gen)
        return hidden, extras

    def send_ffn_output(self, hidden: torch.Tensor, layer: int, stage: int) -> None:
        self.calls.append(("send", layer, stage))
        self.outputs[(layer, stage)] = hidden.clone()

    def close(self) -> None: ...


def run_layer(layer: int, hidden: torch.Tensor, logits: torch.Tensor | None) -> Any:
    out = hidden * (layer + 2)
    if logits is not None:
        out = out + logits.sum(-1, keepdim=True)
    return out


def serve(payloads: Any, branch: StepKind, graphs: FFNGraphCache | None) -> Any:
    connector = FakeConnector(payloads)
    serve_ffn_step(
        connector, run_layer, (0, 1), payloads, branch, graphs, torch.device("cpu")
    )
    return connector


def test_replay_gives_what_eager_gives_and_capture_moves_no_data() -> None:
    backend = ReplayingBackend()
    graphs = FFNGraphCache(backend)
    capture = stage_payloads([(4, 4), (4, 4)], "capture", 2, graph_sizes=[4, 4])
    captured = serve(capture, StepKind.CAPTURE, graphs)
    assert captured.calls == [] and backend.captures == 4  # 2 layers x 2 stages
    assert graphs.captured_keys() == ((0, 2, 4), (1, 2, 4))
    replay = stage_payloads([(4, 4), (4, 4)], "replay", 2, graph_sizes=[4, 4])
    replayed = serve(replay, StepKind.REPLAY, graphs)
    eager = serve(stage_payloads([(4, 4), (4, 4)], "eager", 2), StepKind.EAGER, None)
    assert backend.replays == 4
    assert replayed.outputs.keys() == eager.outputs.keys()
    for key, out in eager.outputs.items():
        assert torch.allclose(replayed.outputs[key], out), key


def test_two_micro_batches_follow_the_interleaved_order() -> None:
    connector = serve(stage_payloads([(2,), (3,)], "eager", 2), StepKind.EAGER, None)
    assert connector.calls == [
        ("recv", 0, 0),
        ("recv", 0, 1),
        ("send", 0, 0),
        ("recv", 1, 0),
        ("send", 0, 1),
        ("recv", 1, 1),
        ("send", 1, 0),
        ("send", 1, 1),
    ]


def test_a_stage_without_tokens_is_skipped() -> None:
    connector = serve(stage_payloads([(5,)], "warmup", 2), StepKind.WARMUP, None)
    assert {stage for _, _, stage in connector.calls} == {0}
    assert connector.outputs[(1, 0)].shape == (5, HIDDEN)
