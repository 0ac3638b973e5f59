# SPDX-License-Identifier: Apache-2.0
"""vLLM's serving features under AFD, through real vLLM on the CPU: each one
changes what a step's batch looks like (prefill chunks beside decodes, tokens
skipped by a cache hit, requests preempted or cancelled between steps,
several tokens per request in a verify step), and each gives the same answers
as colocated vLLM of the same checkpoint with the same flags.

One AFD pair and one colocated server serve every test but the speculative
one (its flag changes every step): a 64-token step budget, so long prompts
prefill in chunks, and a KV cache of 1024 tokens, so a burst preempts. The
The features page's table (``afd_plugin.serving_features``) names these tests;
a renamed test fails its unit test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from afd_e2e.checks.cancel_recover import run_cancel_recover
from afd_e2e.checks.parity import PROMPTS
from afd_e2e.launch.plan import free_port
from afd_e2e.processes.servers import VllmServer, VllmServers, afd_config
from afd_e2e.tiny_model import corpus_lines

pytestmark = pytest.mark.e2e

STEP_TOKENS = 64
# 768 bytes per token (3 layers, one KV head of 64, bf16 K and V): 1024 tokens.
KV_BYTES = 1024 * 768
FEATURE_ARGS = (
    "--max-num-batched-tokens",
    str(STEP_TOKENS),
    "--kv-cache-memory-bytes",
    str(KV_BYTES),
    # A random tiny model fills any budget with the whitespace JSON allows
    # between tokens; this grammar backend, told so, allows none.
    "--structured-outputs-config",
    json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
)
_LINES = corpus_lines()
LONG_PROMPTS = tuple(" ".join(_LINES[40 + 12 * i : 52 + 12 * i]) for i in range(3))
SHARED_PREFIX = " ".join(_LINES[:20]) + "\n"
Pair = tuple[VllmServer, VllmServer, VllmServer]


@pytest.fixture(scope="module")
def pair(qwen3_moe: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """(attention, colocated, ffn), shared by the module's tests; stopped at
    its end, where a server that needed SIGKILL or left a process fails."""
    started = VllmServers(tmp_path_factory.mktemp("serving-features"))
    try:
        ffn, attention = started.afd_pair(qwen3_moe, args=FEATURE_ARGS)
        colocated = started.start("colocated", qwen3_moe, extra_args=FEATURE_ARGS)
        attention.wait_ready()
        colocated.wait_ready()
        yield attention, colocated, ffn
    finally:
        problems = started.stop_all()
    assert not problems, "; ".join(problems)


def prompt_tokens(pair: Pair, prompt: str) -> int:
    """The prompt's length in tokens, asked of both deployments, so that both
    hold it in their prefix cache alike."""
    counts = {
        server.request({"prompt": prompt, "max_tokens": 1})["usage"]["prompt_tokens"]
        for server in pair[:2]
    }
    assert len(counts) == 1, counts
    return counts.pop()


def both(pair: Pair, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same request to the AFD deployment, then to colocated vLLM."""
    attention, colocated, _ = pair
    return attention.request(body), colocated.request(body)


def choices(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(answer["choices"], key=lambda c: c["index"])


def test_chunked_prefill_mixed_with_decodes(pair: Pair) -> None:
    attention, colocated, _ = pair
    lengths = [prompt_tokens(pair, p) for p in LONG_PROMPTS]
    assert min(lengths) > 2 * STEP_TOKENS, lengths  # each prefills in chunks
    # One request: the short prompts' prefill fits one step, so they decode
    # while the long ones prefill a 64-token chunk per step beside them.
    prompts = [*PROMPTS[:4], *LONG_PROMPTS]
    afd = attention.complete(prompts, 32)
    reference = colocated.complete(prompts, 32)
    assert afd == reference


def test_prefix_caching_hits_and_matches(pair: Pair) -> None:
    attention, colocated, _ = pair
    # Longer than one KV block (vLLM's CPU default: 128 tokens): a cache hit
    # is counted in whole blocks.
    assert prompt_tokens(pair, SHARED_PREFIX) > 128
    prompts = [SHARED_PREFIX + p for p in PROMPTS[4:8]]
    hits = "vllm:prefix_cache_hits_total"
    before = attention.counter(hits), colocated.counter(hits)
    afd = attention.complete_each(prompts, 16)
    reference = colocated.complete_each(prompts, 16)
    afd_hits = attention.counter(hits) - before[0]
    colocated_hits = colocated.counter(hits) - before[1]
    assert afd == reference
    # Every prompt after the first finds the shared prefix's full blocks.
    assert afd_hits > 0
    assert afd_hits == colocated_hits
    print(f"evidence: prefix cache hits AFD {afd_hits:g}, colocated {colocated_hits:g}")


def test_preemption_recomputes_and_matches(pair: Pair) -> None:
    attention, colocated, _ = pair
    # Sixteen prompts of about 40 tokens, 96 tokens each: over 2000 tokens of
    # KV for a cache of 1024, so vLLM preempts and later recomputes.
    prompts = [f"{_LINES[200 + i]} {PROMPTS[i % len(PROMPTS)]}" for i in range(16)]
    preempted = "vllm:num_preemptions_total"
    before = attention.counter(preempted), colocated.counter(preempted)
    afd = attention.complete(prompts, 96)
    reference = colocated.complete(prompts, 96)
    afd_preemptions = attention.counter(preempted) - before[0]
    colocated_preemptions = colocated.counter(preempted) - before[1]
    assert afd_preemptions > 0
    assert afd_preemptions == colocated_preemptions
    assert afd == reference
    print(
        f"evidence: preemptions AFD {afd_preemptions:g}, colocated "
        f"{colocated_preemptions:g}; {len(afd)} outputs identical"
    )


def test_cancel_and_recover(pair: Pair) -> None:
    # The scenario check itself (afd_e2e.checks.cancel_recover) against the
    # shared pair: 16 streams, every second one hanging up after 3 chunks.
    attention, colocated, ffn = pair
    pids = attention.pid, ffn.pid
    outcome = run_cancel_recover(
        attention.base_url,
        attention.model,
        streams=16,
        hang_up_after=3,
        max_tokens=64,
        reference_url=colocated.base_url,
    )
    assert outcome.passed, outcome.message
    figures = outcome.figures
    assert figures["client_errors"] == 0
    assert figures["hung_up"] == 8 and figures["finished"] == 8
    # vLLM dropped the hung-up requests: most of their tokens never came.
    assert figures["tokens_not_generated"] > 8 * 32, figures
    # The same servers, still in step, answered a fresh batch as colocated
    # vLLM does.
    assert figures["recovered_prompts"] == 4
    assert (attention.pid, ffn.pid) == pids
    assert attention.exit_code() is None and ffn.exit_code() is None


def test_n_and_seeded_sampling_match(pair: Pair) -> None:
    body = {
        "prompt": PROMPTS[0],
        "n": 3,
        "temperature": 0.8,
        "top_p": 0.9,
        "seed": 1234,
        "max_tokens": 16,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    afd, reference = both(pair, body)
    afd_ids = [c["token_ids"] for c in choices(afd)]
    assert afd_ids == [c["token_ids"] for c in choices(reference)]
    assert len(afd_ids) == 3
    assert len({tuple(ids) for ids in afd_ids}) > 1  # really sampled


def _top(entries: list[dict[str, float] | None]) -> list[dict[str, float]]:
    return [e or {} for e in entries]


def test_logprobs_and_prompt_logprobs_match(pair: Pair) -> None:
    for prompt in PROMPTS[:3]:
        body = {
            "prompt": prompt,
            "max_tokens": 8,
            "temperature": 0.0,
            "logprobs": 3,
            "prompt_logprobs": 2,
            "return_token_ids": True,
        }
        afd, reference = both(pair, body)
        a, r = choices(afd)[0], choices(reference)[0]
        assert a["token_ids"] == r["token_ids"]
        # The prompt's logprobs come from its prefill through the split.
        a_prompt, r_prompt = a["prompt_logprobs"], r["prompt_logprobs"]
        assert len(a_prompt) == len(r_prompt) > 1
        for got, want in zip(a_prompt[1:], r_prompt[1:], strict=True):
            assert got.keys() == want.keys()
            for token, entry in got.items():
                assert entry["logprob"] == pytest.approx(
                    want[token]["logprob"], abs=1e-4
                )
        a_top, r_top = (
            _top(a["logprobs"]["top_logprobs"]),
            _top(r["logprobs"]["top_logprobs"]),
        )
        assert [t.keys() for t in a_top] == [t.keys() for t in r_top]
        for got, want in zip(a_top, r_top, strict=True):
            for token, value in got.items():
                assert value == pytest.approx(want[token], abs=1e-4)


def test_stop_strings_and_min_tokens_match(pair: Pair) -> None:
    attention, colocated, _ = pair
    plain_body = {
        "prompt": PROMPTS[2],
        "max_tokens": 24,
        "temperature": 0.0,
        "return_token_ids": True,
    }
    plain = choices(colocated.request(plain_body))[0]
    stop = plain["text"][10:14]
    afd, reference = both(pair, {**plain_body, "stop": [stop]})
    a, r = choices(afd)[0], choices(reference)[0]
    assert (a["text"], a["finish_reason"]) == (r["text"], r["finish_reason"])
    assert a["finish_reason"] == "stop"
    assert stop not in a["text"] and len(a["text"]) < len(plain["text"])

    # The token greedy decoding picks second is a stop token, held back
    # until 6 tokens are out.
    stop_id = plain["token_ids"][1]
    min_body = {**plain_body, "stop_token_ids": [stop_id], "min_tokens": 6}
    afd, reference = both(pair, min_body)
    a, r = choices(afd)[0], choices(reference)[0]
    assert a["token_ids"] == r["token_ids"]
    assert len(a["token_ids"]) >= 6
    assert a["token_ids"][1] != stop_id


SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


def test_structured_output_matches(pair: Pair) -> None:
    body = {
        "prompt": PROMPTS[8],
        "max_tokens": 48,
        "temperature": 0.0,
        "structured_outputs": {"json": SCHEMA},
    }
    afd, reference = both(pair, body)
    a, r = choices(afd)[0], choices(reference)[0]
    assert (a["text"], a["finish_reason"]) == (r["text"], r["finish_reason"])
    assert a["finish_reason"] == "stop", a
    assert json.loads(a["text"])["answer"] in ("yes", "no")


SPEC_ARGS = (
    "--speculative-config",
    json.dumps(
        {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 3,
        }
    ),
)


def test_ngram_speculative_decoding_matches(
    servers: VllmServers, qwen3_moe: Path
) -> None:
    ffn, attention = servers.afd_pair(qwen3_moe, args=SPEC_ARGS)
    colocated = servers.start("colocated", qwen3_moe, extra_args=SPEC_ARGS)
    attention.wait_ready()
    colocated.wait_ready()
    # Repeated text: the n-gram proposer finds drafts, so verify steps carry
    # several tokens per request through the split.
    prompts = [(p + " ") * 4 for p in PROMPTS[:4]]
    afd = attention.complete_each(prompts, 32)
    reference = colocated.complete_each(prompts, 32)
    assert afd == reference
    names = (
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    )
    afd_counts = [attention.counter(n) for n in names]
    assert afd_counts[1] > 0
    assert afd_counts == [colocated.counter(n) for n in names]
    print(
        f"evidence: n-gram drafts {afd_counts[0]:g} tokens, {afd_counts[1]:g} "
        "accepted, on both; outputs identical"
    )
    assert ffn.exit_code() is None


def test_refused_features_stop_the_server_before_the_model_loads(
    servers: VllmServers, qwen3_moe: Path
) -> None:
    # Two refused features at once on a real server: both named, with their
    # flags, before vLLM loads a weight; the server exits on its own.
    attention = servers.start(
        "attention",
        qwen3_moe,
        afd_config("attention", free_port()),
        ["--enable-lora", "--convert", "embed"],
    )
    code = attention.wait_exit(120)
    log = attention.log_text()
    assert code not in (None, 0), attention.log_tail()
    assert "deployment.lora: --enable-lora is refused under AFD" in log
    assert "deployment.runner_type: --runner pooling (--convert embed) is" in log
    assert "Loading weights" not in log and "load_model" not in log


def test_afd_metrics_move_on_both_roles(
    servers: VllmServers, qwen3_moe: Path, tmp_path: Path
) -> None:
    # Both ways AFD's counters reach vLLM's /metrics: the attention server as
    # a user starts it (its API server's stat-logger plugin reads what the
    # engine wrote), the FFN server in prometheus_client's multiprocess mode
    # (PROMETHEUS_MULTIPROC_DIR set, as vLLM sets it for --api-server-count > 1).
    (tmp_path / "ffn").mkdir()
    envs: dict[str, dict[str, str]] = {
        "ffn": {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "ffn")},
        "attention": {},
        "colocated": {},
    }
    port = free_port()
    ffn = servers.start("ffn", qwen3_moe, afd_config("ffn", port), env=envs["ffn"])
    attention = servers.start(
        "attention", qwen3_moe, afd_config("attention", port), env=envs["attention"]
    )
    colocated = servers.start("colocated", qwen3_moe, env=envs["colocated"])
    attention.wait_ready()
    colocated.wait_ready()
    ffn.wait_ready()  # its API may come up after the attention server is ready
    roles = ((attention, "attention"), (ffn, "ffn"))

    def scrape() -> dict[str, float]:
        return {
            f"{role} {part}": server.counter(
                "afd:step_part_seconds_total", role=role, part=part
            )
            for server, role in roles
            for part in ("compute", "send")
        } | {
            f"{role} steps": server.counter("afd:steps_total", role=role)
            for server, role in roles
        }

    before = scrape()
    assert attention.complete(list(PROMPTS[:4]), 16)
    # Every counter moved during the requests, on the server of its role (the
    # engine hands its counters over every 0.1 s: a scrape may lag that much).
    deadline = time.monotonic() + 5
    while not all((after := scrape())[k] > before[k] for k in before):
        assert time.monotonic() < deadline, (before, after)
        time.sleep(0.1)
    assert attention.counter("afd:micro_batches_total", role="attention") > 0
    # Nothing failed or was refused; those series are there, at 0.
    for server, role in roles:
        assert server.counter("afd:exchange_failures_total", role=role) == 0
    hosts = [s for s, _ in roles if "afd:rendezvous_refusals_total{" in s.metrics()]
    assert [h.counter("afd:rendezvous_refusals_total") for h in hosts] == [0]
    # vLLM's own counters are still there, and its colocated server knows
    # nothing of AFD.
    assert attention.counter("vllm:generation_tokens_total") >= 64
    assert colocated.counter("vllm:generation_tokens_total") >= 0
    with pytest.raises(KeyError):
        colocated.counter("afd:steps_total")
    print("evidence:", {k: round(after[k] - before[k], 4) for k in after})
    for server, role in roles:
        lines = [x for x in server.metrics().splitlines() if x.startswith("afd:")]
        print(f"evidence: {role} /metrics:", *lines[:6], sep="\n  ")
