# SPDX-License-Identifier: Apache-2.0
"""Two micro-batches on the CPU change no token.

The same batch runs on an AFD deployment that splits every decode step in two
(``afd.micro_batches: 2``) and on a colocated server that does not. The batch
is held fixed by sending every prompt in one request and generating the same
number of tokens for each (``ignore_eos``): once the prompts are in, every
decode step holds all of them. Qwen3-MoE, because its CPU kernels give a
prompt the same tokens in any batch shape (``test_parity.py`` shows it
batched); DeepSeek's MLA does not, and a split changes the batch shape by
definition. The attention log proves the steps really ran split.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from afd_e2e.checks.parity import PROMPTS
from afd_e2e.processes.servers import VllmServers
from afd_plugin.evidence import parse_line

pytestmark = pytest.mark.e2e

SPLIT_ARGS = ("--dbo-decode-token-threshold", "2")


def split_steps(log_text: str, role: str) -> list[tuple[int, ...]]:
    """Tokens per micro-batch of each step the role's log reports split."""
    found = []
    for line in log_text.splitlines():
        record = parse_line(line)
        if record is not None and record.role == role:
            found.append(record.tokens)
    return found


def test_the_split_changes_no_token(servers: VllmServers, qwen3_moe: Path) -> None:
    ffn, attention = servers.afd_pair(qwen3_moe, args=SPLIT_ARGS, micro_batches=2)
    colocated = servers.start("colocated", qwen3_moe, extra_args=SPLIT_ARGS)
    attention.wait_ready()
    colocated.wait_ready()
    before = len(split_steps(attention.log_text(), "attention"))

    split = attention.complete(PROMPTS, max_tokens=16)
    whole = colocated.complete(PROMPTS, max_tokens=16)

    assert split == whole
    assert all(len(t) == 16 for t in split)
    # The decode steps of that request ran as two halves on both roles.
    halves = (len(PROMPTS) // 2, len(PROMPTS) - len(PROMPTS) // 2)
    steps = split_steps(attention.log_text(), "attention")[before:]
    assert steps.count(halves) >= 10, steps
    assert split_steps(ffn.log_text(), "ffn"), ffn.log_tail()
    # One request at a time never splits (one sequence per step).
    settled = len(split_steps(attention.log_text(), "attention"))
    assert attention.complete(PROMPTS[:1], max_tokens=8) == colocated.complete(
        PROMPTS[:1], max_tokens=8
    )
    assert len(split_steps(attention.log_text(), "attention")) == settled
    assert "shared-memory data path with 1 peer(s)" in ffn.log_text()
    assert ffn.exit_code() is None, ffn.log_tail()


def test_two_ranks_split_their_own_uneven_steps_and_change_no_token(
    servers: VllmServers, qwen3_moe: Path
) -> None:
    """2A1F: each attention rank splits its own steps and the FFN rank pairs
    stage 0, then stage 1, of both. The load is held uneven and fixed: vLLM's
    ``X-data-parallel-rank`` header sends six prompts in one request to rank 0
    (every decode step 3+3) and one prompt to rank 1 (never split: its
    stage 1 is empty), at once, every prompt generating the same number of
    tokens (``ignore_eos``). So the FFN's stage 0 holds rank 0's first half
    and all of rank 1 (4 rows), its stage 1 rank 0's second half (3 rows)."""
    ffn, attention = servers.afd_pair(
        qwen3_moe,
        args=SPLIT_ARGS,
        attention_args=["--data-parallel-size", "2"],
        micro_batches=2,
        num_attention_ranks=2,
    )
    colocated = servers.start("colocated", qwen3_moe, extra_args=SPLIT_ARGS)
    attention.wait_ready()
    colocated.wait_ready()
    before = {
        "attention": len(split_steps(attention.log_text(), "attention")),
        "ffn": len(split_steps(ffn.log_text(), "ffn")),
    }

    loads = {0: list(PROMPTS[:6]), 1: [PROMPTS[6]]}
    with ThreadPoolExecutor(2) as pool:
        futures = {
            rank: pool.submit(attention.complete, prompts, 16, dp_rank=rank)
            for rank, prompts in loads.items()
        }
        afd = {rank: f.result() for rank, f in futures.items()}
    for rank, prompts in loads.items():
        assert afd[rank] == colocated.complete(prompts, max_tokens=16), rank

    records = [
        r
        for r in map(parse_line, attention.log_text().splitlines())
        if r is not None and r.role == "attention"
    ][before["attention"] :]
    by_rank = {k: [r.tokens for r in records if r.rank == k] for k in (0, 1)}
    assert by_rank[0].count((3, 3)) >= 10, by_rank
    assert by_rank[1] == [], by_rank  # one request per step: never split
    paired = split_steps(ffn.log_text(), "ffn")[before["ffn"] :]
    assert paired.count((4, 3)) >= 10, paired
    assert ffn.exit_code() is None, ffn.log_tail()
