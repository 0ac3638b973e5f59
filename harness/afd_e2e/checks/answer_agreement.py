# SPDX-License-Identifier: Apache-2.0
"""AFD answers equal colocated answers: compares lm-eval's per-sample responses
of two GSM8K runs document by document."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Agreement:
    passed: bool
    message: str
    compared: int
    differing: int


def responses(samples_path: Path) -> dict[int, list[str]]:
    """doc_id -> raw responses from an lm-eval samples JSONL file."""
    out: dict[int, list[str]] = {}
    with samples_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                resps = record.get("resps", [])
                out[int(record["doc_id"])] = [str(r) for group in resps for r in group]
    return out


def compare_runs(reference: Path | None, afd: Path | None) -> Agreement:
    if reference is None or afd is None or not reference.is_file() or not afd.is_file():
        return Agreement(
            False,
            "FAIL gsm8k answers: a samples file is missing "
            f"(colocated {reference}, AFD {afd})",
            0,
            0,
        )
    ref, got = responses(reference), responses(afd)
    if set(ref) != set(got):
        return Agreement(
            False,
            "FAIL gsm8k answers: the runs evaluated different "
            f"documents ({len(ref)} vs {len(got)})",
            0,
            0,
        )
    differing = sorted(d for d in ref if ref[d] != got[d])
    if differing:
        first = differing[0]
        return Agreement(
            False,
            f"FAIL gsm8k answers: {len(differing)}/{len(ref)} "
            f"differ from the colocated run; first doc {first}: "
            f"{ref[first][0][:60]!r} vs {got[first][0][:60]!r}",
            len(ref),
            len(differing),
        )
    return Agreement(
        True,
        f"PASS gsm8k answers: {len(ref)}/{len(ref)} identical to the colocated run",
        len(ref),
        0,
    )
