# SPDX-License-Identifier: Apache-2.0
"""Token parity: the AFD deployment's greedy tokens equal a colocated vLLM run
of the same model, token for token, on a fixed prompt set."""

from __future__ import annotations

from dataclasses import dataclass

from afd_e2e.checks.completions import greedy_token_ids

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
    try:
        return greedy_token_ids(base_url, model, [prompt], max_tokens, timeout_s)[0]
    except OSError as exc:
        raise ParityError(f"{base_url}: completion request failed: {exc}") from None
    except ValueError as exc:
        raise ParityError(f"{base_url}: {exc}") from None


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
