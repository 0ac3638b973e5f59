# SPDX-License-Identifier: Apache-2.0
"""Built-in model shapes for ``afd-e2e plan --model NAME``: published models'
Hugging Face config fields, each with the source of its numbers.

They go through the same parser as a ``config.json`` (``shapes.py``).
"""

from __future__ import annotations

from typing import Any

BUILTIN_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek-v3": (
        (
            "deepseek-ai/DeepSeek-V3 config.json (also Step-3 arXiv 2507.19427 "
            "Table 2/3: MLA, 576 cached values per token per layer)"
        ),
        {
            "model_type": "deepseek_v3",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "moe_intermediate_size": 2048,
            "num_hidden_layers": 61,
            "first_k_dense_replace": 3,
            "num_attention_heads": 128,
            "num_key_value_heads": 128,
            "n_routed_experts": 256,
            "num_experts_per_tok": 8,
            "n_shared_experts": 1,
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "vocab_size": 129280,
        },
    ),
    "step-3": (
        (
            "Step-3 arXiv 2507.19427 Table 1 (61 layers, hidden 7168, MFA: 64 query "
            "heads sharing one 256-wide key and value head, query rank 2048, one "
            "shared expert, MoE in all layers but the first four and the last) and "
            "the stepfun-ai/step3 config.json (48 routed experts, top-3, expert "
            "width 5120, dense width 18432, vocabulary 128815)"
        ),
        {
            "model_type": "step3_text",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "moe_intermediate_size": 5120,
            "num_hidden_layers": 61,
            "num_attention_heads": 64,
            "num_attention_groups": 1,
            "head_dim": 256,
            "share_q_dim": 2048,
            "moe_num_experts": 48,
            "moe_top_k": 3,
            "share_expert_dim": 5120,
            "moe_layers_enum": ",".join(str(i) for i in range(4, 60)),
            "vocab_size": 128815,
        },
    ),
    "qwen3-235b-a22b": (
        (
            "Qwen/Qwen3-235B-A22B config.json (Step-3 arXiv 2507.19427 Tables 2/3 "
            "compare it as Qwen3 MoE)"
        ),
        {
            "model_type": "qwen3_moe",
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "moe_intermediate_size": 1536,
            "num_hidden_layers": 94,
            "num_attention_heads": 64,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "mlp_only_layers": [],
            "decoder_sparse_step": 1,
            "vocab_size": 151936,
        },
    ),
}
