# SPDX-License-Identifier: Apache-2.0
"""Serve one FFN step: eager, warm-up and profile steps run the blocks; a
capture step records each layer's block into the graph cache (no data moves);
a replay step moves data and replays the captured blocks.

Torch only (no vLLM): the runner mixin wraps it in the forward context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from afd_plugin import step_timing
from afd_plugin.connectors.base import AFDConnector, ExchangeSpec
from afd_plugin.graph_policy import make_ffn_graph_key
from afd_plugin.runtime.ffn_graphs import FFNGraphCache
from afd_plugin.runtime.ffn_schedule import exchange_schedule
from afd_plugin.step_kind import StepKind
from afd_plugin.step_protocol import live_stages, stage_rows
from afd_plugin.wire import AFDControlPayload

_CLOCK = step_timing.clock("ffn")
RunLayer = Callable[[int, torch.Tensor, torch.Tensor | None], torch.Tensor]


def static_inputs(
    spec: ExchangeSpec, layer: int, rows: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """The buffers a captured layer reads; a replay copies received data in."""
    inputs = {
        "hidden": torch.zeros(
            rows, spec.hidden_size, dtype=getattr(torch, spec.dtype), device=device
        )
    }
    width = spec.layer(layer).router_logits
    if width:
        inputs["router_logits"] = torch.zeros(
            rows, width, dtype=getattr(torch, spec.router_dtype), device=device
        )
    return inputs


def _fill(hidden: torch.Tensor, extras: dict[str, torch.Tensor]):
    def fill(inputs: dict[str, torch.Tensor]) -> None:
        inputs["hidden"].copy_(hidden)
        if "router_logits" in inputs:
            inputs["router_logits"].copy_(extras["router_logits"])

    return fill


def serve_ffn_step(
    connector: AFDConnector,
    run_layer: RunLayer,
    layers: Sequence[int],
    payloads: tuple[AFDControlPayload, ...],
    kind: StepKind,
    graphs: FFNGraphCache | None,
    device: torch.device,
) -> None:
    """Serve the step ``payloads`` describe (the connector state is already
    updated from them); stages without data are skipped."""
    stages = live_stages(payloads)
    if kind.is_graph and graphs is None:
        raise RuntimeError(f"a {kind.value} step needs an FFN graph cache")
    if kind is StepKind.CAPTURE:
        assert graphs is not None and connector.spec is not None
        for stage in stages:
            payload = payloads[stage]
            key = make_ffn_graph_key(payload)
            rows = sum(stage_rows(payload))
            for layer in layers:
                graphs.capture(
                    key,
                    layer,
                    static_inputs(connector.spec, layer, rows, device),
                    lambda x, layer=layer: run_layer(
                        layer, x["hidden"], x.get("router_logits")
                    ),
                )
        return
    received: dict[tuple[int, int], tuple[torch.Tensor, dict[str, torch.Tensor]]] = {}
    for op in exchange_schedule(layers, stages, connector.buffered_sends):
        if not connector.takes_part(op.layer, op.stage):
            continue  # a standby's resumed step: done before it took over
        if op.kind == "recv":
            with _CLOCK.part("recv"):
                received[(op.layer, op.stage)] = connector.recv_attn_output(
                    op.layer, op.stage
                )
            continue
        hidden, extras = received.pop((op.layer, op.stage))
        with _CLOCK.part("compute"):
            if kind is StepKind.REPLAY:
                assert graphs is not None
                key = make_ffn_graph_key(payloads[op.stage])
                out = graphs.replay(key, op.layer, _fill(hidden, extras))
            else:
                out = run_layer(op.layer, hidden, extras.get("router_logits"))
        with _CLOCK.part("send"):
            connector.send_ffn_output(out, op.layer, op.stage)
