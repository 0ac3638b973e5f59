# SPDX-License-Identifier: Apache-2.0
"""GSM8K-format items generated locally, for runs that have no real data set:
a question, a worked answer and ``#### <number>``, deterministic by seed; and
which item an lm-eval ``gsm8k`` prompt asks about (how a stand-in server,
in tests and benchmarks, knows what to answer)."""

from __future__ import annotations

import json
import random
from pathlib import Path

NAMES = ("Janet", "Tom", "Maria", "Ali", "Chen", "Sara", "Omar", "Lena")
THINGS = ("apples", "books", "eggs", "coins", "pencils", "cups", "stamps")


def make_item(rng: random.Random) -> dict[str, str]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
    total = (a + b) * c
    question = (
        f"{name} has {a} {thing} and gets {b} more. {name} then makes "
        f"{c} equal piles of that size. How many {thing} are in the piles?"
    )
    answer = (
        f"{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {thing}.\n"
        f"The piles hold {a + b} * {c} = <<{a + b}*{c}={total}>>{total} {thing}.\n"
        f"#### {total}"
    )
    return {"question": question, "answer": answer}


def write_items(directory: Path, test: int, train: int, seed: int = 0) -> Path:
    """Write ``test.jsonl`` and ``train.jsonl`` (the published layout)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for name, count in (("test", test), ("train", train)):
        with (directory / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            for _ in range(count):
                fh.write(json.dumps(make_item(rng)) + "\n")
    return directory


def last_question(prompt: str) -> str:
    """The question lm-eval's gsm8k prompt ends with ("Question: ...\\nAnswer:")."""
    start = prompt.rfind("Question: ")
    end = prompt.rfind("\nAnswer:")
    return prompt[start + len("Question: ") : end] if 0 <= start < end else ""
