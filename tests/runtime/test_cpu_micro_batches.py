# SPDX-License-Identifier: Apache-2.0
"""The CPU micro-batch driver: a step vLLM sliced runs as two micro-batch
threads that take turns at every layer's send, each in its own forward
context, and returns the halves' outputs in token order."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.forward_context import (
    get_forward_context,
    is_forward_context_available,
    set_forward_context,
)
from vllm.v1.worker.ubatch_utils import UBatchSlice

from afd_plugin.models import micro_batch
from afd_plugin.runtime.cpu.micro_batches import CPUMicroBatchModel


class LayerRecorder(nn.Module):
    """Stands in for the attention role model: per layer it 'sends' (records)
    and yields the turn like RemoteFFN, then 'receives'."""

    def __init__(self, layers: int, fail_at: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.layers = layers
        self.fail_at = fail_at
        self.events: list[tuple[str, int, int]] = []
        self.threads: set[int] = set()
        self.inference: list[bool] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        intermediate_tensors: object = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        ubatch = micro_batch.current_ubatch()
        assert ubatch is not None
        mine = get_forward_context().attn_metadata
        self.threads.add(threading.get_ident())
        self.inference.append(torch.is_inference_mode_enabled())
        for layer in range(self.layers):
            if self.fail_at == (ubatch, layer):
                raise ValueError(f"micro-batch {ubatch} fails at layer {layer}")
            self.events.append(("send", layer, ubatch))
            micro_batch.yield_turn()
            # Back on turn: this micro-batch's own forward context again.
            assert get_forward_context().attn_metadata is mine
            self.events.append(("recv", layer, ubatch))
        return (input_ids * 10 + positions).float().unsqueeze(1)


SLICES = [
    UBatchSlice(slice(0, 3), slice(0, 3)),
    UBatchSlice(slice(3, 5), slice(3, 5)),
]
INPUTS = {
    "input_ids": torch.arange(5),
    "positions": torch.arange(100, 105),
    "intermediate_tensors": None,
    "inputs_embeds": None,
}


def run_sliced(wrapper: CPUMicroBatchModel, slices=SLICES) -> torch.Tensor:
    metadata = [{"ubatch": i} for i in range(len(slices))]
    with set_forward_context(
        metadata, wrapper.vllm_config, num_tokens=5, ubatch_slices=slices
    ):
        parent = get_forward_context()
        out = wrapper(**INPUTS)
        # The calling thread gets its own context back.
        assert get_forward_context() is parent
    return out


def test_the_halves_take_turns_at_every_send_and_join_in_token_order() -> None:
    model = LayerRecorder(layers=3)
    wrapper = CPUMicroBatchModel(model, VllmConfig(), 2)
    out = run_sliced(wrapper)
    assert torch.equal(
        out.squeeze(1), (INPUTS["input_ids"] * 10 + INPUTS["positions"]).float()
    )
    # Micro-batch 1 sends layer L while micro-batch 0 waits for layer L's
    # output: the order runtime/ffn_schedule.py serves.
    assert model.events[:6] == [
        ("send", 0, 0),
        ("send", 0, 1),
        ("recv", 0, 0),
        ("send", 1, 0),
        ("recv", 0, 1),
        ("send", 1, 1),
    ]
    assert len(model.events) == 2 * 3 * 2
    assert model.events[-1] == ("recv", 2, 1)
    assert threading.get_ident() not in model.threads and len(model.threads) == 2
    assert model.inference == [True, True]
    # The threads live with the wrapper: a second step reuses them.
    first = set(model.threads)
    run_sliced(wrapper)
    assert model.threads == first
    assert micro_batch.current_ubatch() is None  # not on the calling thread


def test_a_step_vllm_did_not_slice_runs_the_model_as_it_is() -> None:
    seen: list[int | None] = []

    class Plain(nn.Module):
        def forward(self, input_ids: torch.Tensor, **_: object) -> torch.Tensor:
            seen.append(micro_batch.current_ubatch())
            return input_ids

    wrapper = CPUMicroBatchModel(Plain(), VllmConfig(), 2)
    with set_forward_context(None, wrapper.vllm_config, num_tokens=5):
        assert torch.equal(wrapper(input_ids=torch.arange(5)), torch.arange(5))
    assert seen == [None]
    assert wrapper.unwrap().__class__ is Plain


def test_a_failing_micro_batch_raises_in_the_caller_and_frees_the_other() -> None:
    model = LayerRecorder(layers=3, fail_at=(0, 1))
    wrapper = CPUMicroBatchModel(model, VllmConfig(), 2)
    with pytest.raises(ValueError, match="micro-batch 0 fails at layer 1"):
        run_sliced(wrapper)
    # The other micro-batch ran to its end alone (its yields no longer wait).
    assert ("recv", 2, 1) in model.events
    assert not is_forward_context_available()


def test_a_split_into_other_than_the_agreed_count_is_refused() -> None:
    wrapper = CPUMicroBatchModel(LayerRecorder(layers=1), VllmConfig(), 2)
    three = [
        UBatchSlice(slice(0, 1), slice(0, 1)),
        UBatchSlice(slice(1, 2), slice(1, 2)),
        UBatchSlice(slice(2, 5), slice(2, 5)),
    ]
    with pytest.raises(RuntimeError, match="3 micro-batches.*agreed on 2"):
        run_sliced(wrapper, three)
