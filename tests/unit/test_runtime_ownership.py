# SPDX-License-Identifier: Apache-2.0
"""Each role loads only its own checkpoint weights, and both roles must agree
on the exchange spec they derive from their model.
"""

from __future__ import annotations

import pytest

from afd_plugin.connectors.base import ExchangeSpec, LayerExchange
from afd_plugin.models.ownership import owned_by_role

NAMES = {
    "model.embed_tokens.weight": "attention",
    "lm_head.weight": "attention",
    "model.norm.weight": "attention",
    "model.layers.0.input_layernorm.weight": "attention",
    "model.layers.0.post_attention_layernorm.weight": "attention",
    "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": "attention",
    "model.layers.0.mlp.gate_proj.weight": "ffn",
    "model.layers.0.mlp.down_proj.weight": "ffn",
    "model.layers.1.mlp.experts.3.up_proj.weight": "ffn",
    "model.layers.1.mlp.shared_experts.gate_proj.weight": "ffn",
    "model.layers.12.mlp.shared_expert_gate.weight": "ffn",
    # Hybrid models: the linear-attention layers and their state are the
    # attention role's; the multimodal checkpoints of Qwen3.5/3.6 keep the
    # language model under model.language_model and a vision tower beside it.
    "model.layers.0.linear_attn.in_proj_qkvz.weight": "attention",
    "model.layers.0.linear_attn.A_log": "attention",
    "model.language_model.layers.0.linear_attn.conv1d.weight": "attention",
    "model.language_model.layers.3.self_attn.q_proj.weight": "attention",
    "model.language_model.embed_tokens.weight": "attention",
    "model.visual.blocks.0.attn.qkv.weight": "attention",
    "mtp.layers.0.mlp.experts.0.up_proj.weight": "attention",
    "model.language_model.layers.0.mlp.experts.7.down_proj.weight": "ffn",
    "model.language_model.layers.0.mlp.shared_expert.up_proj.weight": "ffn",
    "model.language_model.layers.0.mlp.shared_expert_gate.weight": "ffn",
}


@pytest.mark.parametrize("gate_on_attention", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_every_weight_has_exactly_one_owner(name: str, gate_on_attention: bool) -> None:
    owners = [
        r for r in ("attention", "ffn") if owned_by_role(name, r, gate_on_attention)
    ]
    assert owners == [NAMES[name]]


def test_gate_weight_follows_the_gate_and_routing_bias_stays_on_ffn() -> None:
    weight = "model.layers.1.mlp.gate.weight"
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    assert owned_by_role(weight, "ffn", False)
    assert not owned_by_role(weight, "attention", False)
    assert owned_by_role(weight, "attention", True)
    assert not owned_by_role(weight, "ffn", True)
    # The FFN role does the top-k, so it keeps the bias; the attention role
    # loads it too when it holds the gate module.
    assert owned_by_role(bias, "ffn", True) and owned_by_role(bias, "ffn", False)
    assert owned_by_role(bias, "attention", True)
    vl_gate = "model.language_model.layers.2.mlp.gate.weight"
    assert owned_by_role(vl_gate, "ffn", False)
    assert not owned_by_role(vl_gate, "attention", False)


def spec(router_logits: int = 0, dtype: str = "bfloat16") -> ExchangeSpec:
    layers = (LayerExchange(0, "dense"), LayerExchange(1, "moe", router_logits))
    return ExchangeSpec(64, dtype, "float32", layers)


def test_exchange_specs_agree_or_name_the_difference() -> None:
    assert spec().differences(spec()) == []
    assert ExchangeSpec.from_dict(spec(4).to_dict()) == spec(4)
    diffs = spec(4, "float32").differences(spec(0))
    assert "dtype: 'float32' != 'bfloat16'" in diffs
    assert any(d.startswith("layer 1: ") for d in diffs)
    assert spec().layer(1).kind == "moe"
    with pytest.raises(KeyError, match="layer 7"):
        spec().layer(7)
