# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e gsm8k``: the GSM8K accuracy gate against a running attention API.

Exit 0 only when the gate passes; 1 when it fails; 2 when the run is refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from afd_e2e.checks.gsm8k import Gsm8kRequest, run_gsm8k
from afd_e2e.checks.gsm8k.gate import FLEXIBLE
from afd_e2e.define.policy import GSM8K_DATA_ENV, GSM8K_LIMIT_ENV, GSM8K_THRESHOLD_ENV

REFUSED_EXIT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Gsm8kRequest(base_url="", model="")
    parser.add_argument(
        "--base-url",
        required=True,
        help="attention API: http://HOST:PORT, .../v1 or .../v1/completions",
    )
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="test items to evaluate, exactly (default: the whole test split; "
        f"{GSM8K_LIMIT_ENV} overrides outside CI)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=defaults.threshold,
        help="minimum exact_match,strict-match (default %(default)s; "
        f"{GSM8K_THRESHOLD_ENV} overrides, in CI only upwards)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=defaults.concurrency,
        help="requests in flight",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help=f"local GSM8K directory or test file (default: ${GSM8K_DATA_ENV})",
    )
    parser.add_argument(
        "--tokenizer", type=Path, default=None, help="local tokenizer directory"
    )
    parser.add_argument(
        "--fewshot", type=int, default=defaults.fewshot, help="few-shot examples"
    )
    parser.add_argument(
        "--max-gen-toks",
        type=int,
        default=defaults.max_gen_toks,
        help="generated tokens per answer, at most",
    )
    parser.add_argument(
        "--dbo",
        action="store_true",
        help="a DBO deployment: require concurrency >= 12 and >= 24 samples",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default runs/...)"
    )


def run(args: argparse.Namespace) -> int:
    result = run_gsm8k(
        Gsm8kRequest(
            base_url=args.base_url,
            model=args.model,
            samples=args.samples,
            threshold=args.threshold,
            concurrency=args.concurrency,
            fewshot=args.fewshot,
            data=args.data,
            tokenizer=args.tokenizer,
            out_dir=args.out,
            dbo=args.dbo,
            max_gen_toks=args.max_gen_toks,
        )
    )
    if result.flexible is not None:
        print(f"gsm8k {FLEXIBLE} {result.flexible:.4f} (n={result.n}, not gated)")
    if result.summary_path is not None:
        print(f"gsm8k: results in {result.out_dir}", file=sys.stderr)
    for notice in result.notices:
        print(notice, file=sys.stderr)
    print(result.message)
    if result.refused:
        return REFUSED_EXIT
    return 0 if result.passed else 1
