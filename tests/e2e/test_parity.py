# SPDX-License-Identifier: Apache-2.0
"""Token parity: an AFD deployment (attention server + FFN server exchanging
hidden states per layer over gloo) produces the greedy tokens of colocated vLLM.

Prompts go one request at a time: on the CPU backend vLLM's MLA path (DeepSeek)
gives a prompt other tokens depending on which prompts share its batch, in a
colocated server too. Qwen3-MoE and Qwen3.5 are also compared batched, against
the same batch on the colocated server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.processes.servers import VllmServers

pytestmark = pytest.mark.e2e

BF16 = ("--dtype", "bfloat16")
"""vLLM's CPU Gated DeltaNet kernels (Qwen3.5/3.6, Qwen3-Next) run bf16 only."""
CASES: dict[str, tuple[str, dict, tuple[str, ...]]] = {
    "deepseek_v2-gate-on-ffn": ("deepseek_v2", {}, ()),
    "deepseek_v2-gate-on-attention": (
        "deepseek_v2",
        {"compute_gate_on_attention": True},
        (),
    ),
    "qwen3_moe": ("qwen3_moe", {}, ()),
    # The text-only Qwen3.5/3.6-MoE class (checkpoints without a vision tower).
    "qwen3_5_moe-text-only": ("qwen3_5_moe", {}, BF16),
}
BATCHED = ("qwen3_moe", "qwen3_5_moe")
"""Models also compared with all prompts in one request."""


@pytest.fixture(scope="module")
def colocated_tokens() -> dict[str, list[list[int]]]:
    """Greedy tokens of a colocated (non-AFD) server, by model, once each."""
    return {}


@pytest.mark.parametrize("case", CASES)
def test_afd_tokens_equal_colocated(
    case: str,
    servers: VllmServers,
    colocated_tokens: dict[str, list[list[int]]],
    request: pytest.FixtureRequest,
) -> None:
    arch, afd, args = CASES[case]
    model = request.getfixturevalue(arch)
    ffn, attention = servers.afd_pair(model, args=args, **afd)
    baseline = None
    if arch not in colocated_tokens:
        baseline = servers.start("colocated", model, extra_args=args)
    attention.wait_ready()
    afd_tokens = attention.complete_each(PROMPTS)
    if baseline is not None:
        baseline.wait_ready()
        colocated_tokens[arch] = baseline.complete_each(PROMPTS)
        if arch in BATCHED:
            colocated_tokens[f"{arch}-batched"] = baseline.complete(PROMPTS)
        baseline.stop()

    assert afd_tokens == colocated_tokens[arch]
    assert all(len(t) == 16 for t in afd_tokens)
    if arch in BATCHED:
        # All prompts in one request: multi-sequence steps on both roles, the
        # same steps as the colocated server's.
        batched = attention.complete(PROMPTS)
        assert batched == colocated_tokens[f"{arch}-batched"]
        if arch == "qwen3_moe":
            # Qwen3-MoE's CPU kernels give a prompt its tokens in any batch;
            # the hybrid models' do not, colocated or not.
            assert batched == colocated_tokens[arch]
    assert ffn.exit_code() is None, ffn.log_tail()
    ffn_log = ffn.log_text()
    assert "AFD ffn rank 0 joined the AFD world" in ffn_log
    assert "FFN daemon serving" in ffn_log
    # Both roles on one machine: the hidden states took the shared-memory path.
    assert "shared-memory data path with 1 peer(s)" in ffn_log
    # The FFN server holds no KV cache; the attention server does.
    assert "KV cache size" not in ffn_log
    assert "KV cache size" in attention.log_text()


def test_two_attention_ranks_share_one_ffn_rank(
    servers: VllmServers, deepseek_v2: Path
) -> None:
    """2A1F: attention DP2 (two engine cores, one attention rank each) served
    by one FFN rank. The FFN batches the tokens of both ranks (an idle rank
    sends its dummy token), so its kernels see other batch shapes than the
    colocated server; fp32 makes the comparison exact on this model. AMX
    hosts would pick the AMX_MLA backend, which refuses fp32 weights; CPU_MLA
    is what every other host picks."""
    fp32 = ["--dtype", "float32", "--attention-backend", "CPU_MLA"]
    ffn, attention = servers.afd_pair(
        deepseek_v2,
        args=fp32,
        attention_args=["--data-parallel-size", "2"],
        num_attention_ranks=2,
    )
    baseline = servers.start("colocated-fp32", deepseek_v2, extra_args=fp32)
    attention.wait_ready()
    afd_tokens = attention.complete_each(PROMPTS)
    baseline.wait_ready()
    assert afd_tokens == baseline.complete_each(PROMPTS)
    log = attention.log_text()
    for rank in (0, 1):
        assert f"AFD attention rank {rank} joined the AFD world" in log
    assert "(3 ranks)" in log
