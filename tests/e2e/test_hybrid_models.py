# SPDX-License-Identifier: Apache-2.0
"""Hybrid models (Qwen3.5/3.6 MoE, Qwen3-Next: Gated DeltaNet + gated full
attention) under AFD, started as the README says (two `vllm serve` commands,
every plugin of the environment loaded): the attention server holds the KV
cache and the linear-attention state, the FFN server neither; prefix caching,
chunked prefill and preemption behave as in colocated vLLM of the same
checkpoint, with the same tokens and the same counts in vLLM's own metrics.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.processes.servers import VllmServers
from afd_e2e.tiny_model import corpus_lines

pytestmark = pytest.mark.e2e

# vLLM sizes a hybrid model's attention blocks so that one page holds a
# linear-attention state: 256 tokens here. The shared prefix (about 300
# tokens) fills one block, so every prompt after the first hits the prefix
# cache; each prompt (440-500 tokens) is longer than a step's token budget,
# so its prefill runs in chunks.
_LINES = corpus_lines()
SHARED_PREFIX = " ".join(_LINES[:18]) + "\n"
PROMPTS_WITH_PREFIX = [
    SHARED_PREFIX + " ".join(_LINES[100 + 20 * i : 108 + 20 * i]) + "\n" + p
    for i, p in enumerate(PROMPTS[:6])
]
STEP_TOKENS = "64"
# Three blocks of cache (vLLM's minimum for a 768-token context): two prompts
# fit (one shared block, one block each), then their decodes cross into a
# third block each (GENERATED tokens), which the cache does not hold, so vLLM
# preempts one and recomputes it later.
KV_BYTES = "2097152"
GENERATED = 96
# The checkpoint layout Qwen3.5/3.6 ship, served text-only (the README's
# example).
HYBRID_ARGS = [
    "--language-model-only",
    "--dtype",
    "bfloat16",
    "--max-num-batched-tokens",
    STEP_TOKENS,
    "--kv-cache-memory-bytes",
    KV_BYTES,
    "--max-model-len",
    "768",
]


def test_hybrid_state_features_match_colocated(
    servers: VllmServers, qwen3_5_moe_vl: Path
) -> None:
    prompts = PROMPTS_WITH_PREFIX
    ffn, attention = servers.afd_pair(qwen3_5_moe_vl, args=HYBRID_ARGS)
    baseline = servers.start("colocated", qwen3_5_moe_vl, extra_args=HYBRID_ARGS)
    attention.wait_ready()
    baseline.wait_ready()

    # One at a time: chunked prefill of every prompt, prefix hits from the
    # second on.
    afd_each = attention.complete_each(prompts, GENERATED)
    colocated_each = baseline.complete_each(prompts, GENERATED)
    assert afd_each == colocated_each
    hits = "vllm:prefix_cache_hits_total"
    afd_hits, colocated_hits = attention.counter(hits), baseline.counter(hits)
    print(f"prefix cache hits: AFD {afd_hits}, colocated {colocated_hits}")
    assert afd_hits > 0 and afd_hits == colocated_hits

    # All six in one request (the same steps in both deployments): more than
    # the KV cache holds, so vLLM preempts and recomputes, alike in both.
    afd_batched = attention.complete(prompts, GENERATED)
    colocated_batched = baseline.complete(prompts, GENERATED)
    preemptions = "vllm:num_preemptions_total"
    afd_pre, colocated_pre = (
        attention.counter(preemptions),
        baseline.counter(preemptions),
    )
    print(f"preemptions: AFD {afd_pre}, colocated {colocated_pre}")
    assert afd_batched == colocated_batched
    assert afd_pre > 0 and afd_pre == colocated_pre

    # The state lives on the attention server: its hybrid cache groups; the
    # FFN server allocated no cache at all and served every step.
    attention_log, ffn_log = attention.log_text(), ffn.log_text()
    assert "mamba page size" in attention_log
    assert "KV cache size" in attention_log
    assert "KV cache size" not in ffn_log
    assert "mamba page size" not in ffn_log
    assert "FFN daemon serving" in ffn_log
    assert ffn.exit_code() is None, ffn.log_tail()
