# SPDX-License-Identifier: Apache-2.0
"""Token parity: the AFD deployment's greedy tokens equal a colocated vLLM run
of the same model, token for token, on a fixed prompt set."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass

PROMPTS: tuple[str, ...] = (
    "Janet has three apples and buys five more. How many apples does she have?",
    "The train leaves at noon and travels for four hours. It arrives at",
    "Twelve plus seven equals",
    "Tom reads ten pages every day. After six days he has read",
    "A farmer sells eggs for two dollars each. Nine eggs cost",
    "The answer to forty two minus eight is",
    "Maria walks to school. It takes her twenty minutes, so",
    "If a box holds six cups, four boxes hold",
    "Question: what is one hundred divided by four? Answer:",
    "Ali saved fifteen dollars a week for three weeks and then",
)


class ParityError(RuntimeError):
    """A server did not answer the parity request as expected."""


@dataclass(frozen=True)
class ParityOutcome:
    passed: bool
    message: str
    prompts: int
    tokens: int
    mismatches: int


def greedy_tokens(
    base_url: str,
    model: str,
    prompts: list[str],
    max_tokens: int,
    timeout_s: float = 300.0,
) -> list[list[int]]:
    """Generated token ids per prompt: temperature 0, no retries, one request
    per prompt in order. A multi-prompt request is batched as its prompts
    reach the engine, and batch composition changes the float reductions of
    some kernels (MLA on CPU among them), so only one-at-a-time is
    reproducible across two deployments."""
    return [_greedy_one(base_url, model, p, max_tokens, timeout_s) for p in prompts]


def _greedy_one(
    base_url: str, model: str, prompt: str, max_tokens: int, timeout_s: float
) -> list[int]:
    body = json.dumps(
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "return_token_ids": True,
            "ignore_eos": True,
        }
    ).encode()
    request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except OSError as exc:
        raise ParityError(f"{base_url}: completion request failed: {exc}") from None
    choices = answer.get("choices", [])
    if len(choices) != 1:
        raise ParityError(f"{base_url}: {len(choices)} choices for one prompt")
    ids = choices[0].get("token_ids")
    if not isinstance(ids, list):
        raise ParityError(f"{base_url}: no token_ids in the answer (return_token_ids)")
    return [int(t) for t in ids]


def compare(reference: list[list[int]], afd: list[list[int]]) -> ParityOutcome:
    """Token-for-token comparison; the message names the first divergence."""
    mismatched = [
        i for i, (r, a) in enumerate(zip(reference, afd, strict=True)) if r != a
    ]
    tokens = sum(len(r) for r in reference)
    if not mismatched:
        return ParityOutcome(
            True,
            f"PASS parity {len(reference)} prompts, {tokens} "
            "tokens identical to the colocated run",
            len(reference),
            tokens,
            0,
        )
    i = mismatched[0]
    r, a = reference[i], afd[i]
    pairs = enumerate(zip(r, a, strict=False))
    at = next((k for k, (x, y) in pairs if x != y), min(len(r), len(a)))
    return ParityOutcome(
        False,
        f"FAIL parity {len(mismatched)}/{len(reference)} prompts differ; first: prompt "
        f"{i} at token {at}: colocated {r[at : at + 4]} vs AFD {a[at : at + 4]}",
        len(reference),
        tokens,
        len(mismatched),
    )
