# SPDX-License-Identifier: Apache-2.0
"""Which role loads which checkpoint weight: the FFN role the MLP/MoE blocks,
the attention role everything else, the router gate where it runs.

Pure: no torch, no vLLM; checkpoint names follow the HF layout, the language
model's layers under ``model.layers`` or, in multimodal checkpoints (Qwen3.5
and 3.6), under ``model.language_model.layers``.
"""

from __future__ import annotations

import re

_MLP_WEIGHT = re.compile(r"^model\.(?:language_model\.)?layers\.(\d+)\.mlp\.(.+)$")


def owned_by_role(name: str, role: str, gate_on_attention: bool) -> bool:
    """Whether checkpoint weight ``name`` belongs to ``role``. The gate goes
    with the attention role when it computes the router logits; any routing
    bias stays on the FFN role, which does the top-k."""
    match = _MLP_WEIGHT.match(name)
    if match is None:
        return role == "attention"
    rest = match.group(2)
    if rest.startswith("gate."):
        is_weight = rest == "gate.weight"
        if role == "attention":
            return gate_on_attention
        return not (gate_on_attention and is_weight)
    return role == "ffn"
