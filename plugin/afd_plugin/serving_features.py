# SPDX-License-Identifier: Apache-2.0
"""Which of vLLM's serving features work under AFD, with the test that shows
each one, and which are refused, with why.

Pure data, the one table of these facts: the validator refuses what it marks
refused, the features page (docs/features.md) is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass

_FEATURES_TEST = "tests/e2e/test_serving_features.py"


@dataclass(frozen=True)
class ServingFeature:
    """One serving feature of vLLM and what becomes of it under AFD."""

    name: str
    """What a user calls it."""
    flags: tuple[str, ...]
    """The vLLM CLI flags or request fields that turn it on; empty when vLLM
    does it on its own."""
    works: bool
    """True: it runs under AFD; False: the validator refuses it at start."""
    evidence: str = ""
    """``path::test`` of the test that shows it through real vLLM against
    colocated vLLM; empty for a refused feature."""
    reason: str = ""
    """Why it is refused, one sentence a user understands; for a feature that
    works, an optional short note."""

    def __post_init__(self) -> None:
        if self.works and "::" not in self.evidence:
            raise ValueError(
                f"{self.name}: a feature that works names its test as "
                f"'path::test', got {self.evidence!r}"
            )
        if not self.works and not self.reason:
            raise ValueError(f"{self.name}: a refused feature needs a reason")
        if not self.works and self.evidence:
            raise ValueError(f"{self.name}: a refused feature has no evidence")


LORA = ServingFeature(
    name="LoRA adapters",
    flags=("--enable-lora",),
    works=False,
    reason=(
        "adapters patch the weights of layers whose halves live on two servers, "
        "and AFD carries no adapter ids across the split"
    ),
)
DRAFT_SPECULATION = ServingFeature(
    name=(
        "Speculative decoding, any method but n-gram (`eagle`, `eagle3`, `mtp`, "
        "`draft_model`, `medusa`, `mlp_speculator`, `suffix`, ...)"
    ),
    flags=("--speculative-config", "--spec-method", "--spec-model"),
    works=False,
    reason=(
        "a draft model or head runs beside the target model, outside the "
        "attention/FFN split (there is no role-split draft model), and only "
        "n-gram, which proposes from the tokens alone, is tested under AFD"
    ),
)
POOLING = ServingFeature(
    name="Pooling / embedding runners",
    flags=("--runner pooling", "--convert embed|classify"),
    works=False,
    reason=(
        "their steps return hidden states, not tokens, and the FFN role serves "
        "only generate steps"
    ),
)

SPECULATIVE_METHODS_ALLOWED: tuple[str, ...] = ("ngram",)
"""vLLM speculative methods (as its ``SpeculativeConfig`` normalises them)
that AFD runs."""

SERVING_FEATURES: tuple[ServingFeature, ...] = (
    ServingFeature(
        name="Chunked prefill",
        flags=("--enable-chunked-prefill", "--max-num-batched-tokens"),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_chunked_prefill_mixed_with_decodes",
    ),
    ServingFeature(
        name="Prefix caching",
        flags=("--enable-prefix-caching",),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_prefix_caching_hits_and_matches",
    ),
    ServingFeature(
        name="Preemption and recompute",
        flags=(),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_preemption_recomputes_and_matches",
        reason="vLLM preempts on its own when the load outgrows the KV cache",
    ),
    ServingFeature(
        name="Client disconnects mid-stream (cancel and recover)",
        flags=("stream",),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_cancel_and_recover",
    ),
    ServingFeature(
        name="`n > 1` and seeded sampling",
        flags=("n", "seed"),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_n_and_seeded_sampling_match",
    ),
    ServingFeature(
        name="`logprobs` and `prompt_logprobs`",
        flags=("logprobs", "prompt_logprobs"),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_logprobs_and_prompt_logprobs_match",
    ),
    ServingFeature(
        name="Stop strings and `min_tokens`",
        flags=("stop", "min_tokens"),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_stop_strings_and_min_tokens_match",
    ),
    ServingFeature(
        name="Structured output (JSON schema)",
        flags=("response_format", "structured_outputs"),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_structured_output_matches",
    ),
    ServingFeature(
        name="Speculative decoding, n-gram",
        flags=('--speculative-config \'{"method": "ngram", ...}\'',),
        works=True,
        evidence=f"{_FEATURES_TEST}::test_ngram_speculative_decoding_matches",
    ),
    ServingFeature(
        name=(
            "Hybrid models' prefix caching, chunked prefill and preemption "
            "(Qwen3.5/3.6, Qwen3-Next)"
        ),
        flags=("--enable-prefix-caching", "--enable-chunked-prefill"),
        works=True,
        evidence=(
            "tests/e2e/test_hybrid_models.py"
            "::test_hybrid_state_features_match_colocated"
        ),
        reason=(
            "the linear-attention state is cached beside the KV cache, on the "
            "attention role"
        ),
    ),
    LORA,
    DRAFT_SPECULATION,
    POOLING,
)
