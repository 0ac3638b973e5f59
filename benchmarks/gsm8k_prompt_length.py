# SPDX-License-Identifier: Apache-2.0
"""GSM8K prompt lengths in the tiny models' tokens, as a ratio to their context.

lm-eval's gsm8k task writes each item as ``Question: <q>\\nAnswer: <a>`` and
joins the few-shot examples (drawn from the train split) and the test
question with blank lines. This prints, for a GSM8K directory (the published
``test.jsonl`` and ``train.jsonl``; ``--data`` or ``AFD_GSM8K_DATA``):
the tokens of one example and of one test question (median, p99, max), and
the worst case a request can reach, the longest ``--fewshot`` examples plus
the longest question plus ``--max-gen-toks``, as a ratio to the context the
tiny models are built with (``CONTEXT_TOKENS``). A ratio over 1 means vLLM
refuses some requests (HTTP 400).
Usage: python benchmarks/gsm8k_prompt_length.py [--data DIR] [--arch ARCH]
       [--fewshot K] [--max-gen-toks N]   (needs the cpu extra: transformers)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from afd_e2e.checks.gsm8k.data import Gsm8kDataError, resolve_data
from afd_e2e.tiny_model import ARCHS, CONTEXT_TOKENS, build_tiny_model


def read_items(path: Path) -> list[dict[str, str]]:
    """The rows of one split, JSON lines or parquet (the two layouts)."""
    if path.suffix == ".parquet":
        import pandas

        return pandas.read_parquet(path).to_dict("records")
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def spread(values: list[int]) -> dict[str, int]:
    ordered = sorted(values)
    return {
        "median": int(statistics.median(ordered)),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "max": ordered[-1],
    }


def measure(
    test: list[dict[str, str]],
    train: list[dict[str, str]],
    count_tokens: Any,
    fewshot: int,
    max_gen_toks: int,
) -> dict[str, Any]:
    shots = [
        count_tokens(f"Question: {x['question']}\nAnswer: {x['answer']}\n\n")
        for x in train
    ]
    questions = [count_tokens(f"Question: {x['question']}\nAnswer:") for x in test]
    worst = sum(sorted(shots)[-fewshot:]) if fewshot else 0
    worst += max(questions) + max_gen_toks
    return {
        "example_tokens": spread(shots),
        "question_tokens": spread(questions),
        "fewshot": fewshot,
        "max_gen_toks": max_gen_toks,
        "worst_request_tokens": worst,
        "context_tokens": CONTEXT_TOKENS,
        "worst_to_context_ratio": worst / CONTEXT_TOKENS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--arch", choices=ARCHS, default=ARCHS[0])
    parser.add_argument("--fewshot", type=int, default=2)
    parser.add_argument("--max-gen-toks", type=int, default=32)
    args = parser.parse_args(argv)

    try:
        data = resolve_data(args.data, os.environ)
    except Gsm8kDataError as exc:
        print(exc, file=sys.stderr)
        return 2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model(args.arch)))
    tokenizer.model_max_length = sys.maxsize  # measuring, not feeding a model
    result = measure(
        read_items(data.test),
        read_items(data.train),
        lambda text: len(tokenizer(text)["input_ids"]),
        args.fewshot,
        args.max_gen_toks,
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
