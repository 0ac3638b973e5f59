# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e plan``: choose the A:F ratio and micro-batches of an AFD
deployment from a model shape, a hardware profile, a workload and stage times.

Pure arithmetic (``afd_e2e.plan``); nothing is launched or measured here.
Exit 0 with a recommendation, 1 when no plan meets the target, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from afd_e2e.plan.builtin_models import BUILTIN_MODELS
from afd_e2e.plan.profiles import builtin_profiles
from afd_e2e.plan.types import DTYPES, PlanInputError

BAD_INPUT = 2
NO_PLAN = 1

EPILOG = f"""\
built-in models: {", ".join(BUILTIN_MODELS)}
built-in hardware: {", ".join(builtin_profiles())}

--model also takes a Hugging Face config.json (or its directory) or a scenario
id; --hardware also takes a profile YAML (schema and sources: the files in
afd_e2e/plan_profiles/). cpu-2core has no roofline numbers: pass --calibration.

--calibration FILE: CSV with the header batch,attention_s,ffn_s,exchange_s
[,context] or JSON [{{"batch": ..., ...}}]: per-layer times of one micro-batch
measured on 1A1F at two or more batch sizes (afd_e2e/plan_profiles/README.md);
afd-e2e bench ID --profile measures and writes one.
--trace FILE: CSV prompt_tokens,decode_tokens (or JSON), one row per request;
the context becomes the trace's theta.
--evaluate A:F [--batch B]: predict one deployment instead of searching (B
sequences per attention instance and micro-batch, TPOT target or not); to
compare with a measurement at concurrency C, B = C / (A x micro-batches).

Without --calibration the stage times are the roofline at peak: an upper bound
on throughput, useful for comparing plans, not for promising numbers.
"""


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers such as 1,2,3,4, got {text!r}"
        )
    return values


def _shape(text: str) -> tuple[int, int]:
    """``2:1`` or ``2A1F`` -> (2, 1)."""
    plain = text.upper().removesuffix("F").replace("A", ":")
    attention, sep, ffn = plain.partition(":")
    try:
        values = (int(attention), int(ffn)) if sep else ()
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected attention:ffn instances such as 2:1 (or 2A1F), got {text!r}"
        )
    return values[0], values[1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "--model",
        required=True,
        help="built-in model name, config.json path or scenario id",
    )
    parser.add_argument(
        "--hardware", required=True, help="built-in profile name or profile YAML"
    )
    workload = parser.add_mutually_exclusive_group(required=True)
    workload.add_argument(
        "--context", type=float, help="mean KV tokens per sequence during decode"
    )
    workload.add_argument(
        "--trace", type=Path, help="request trace (prompt and decode lengths)"
    )
    parser.add_argument(
        "--tpot-ms", type=float, default=50.0, help="TPOT target (default: 50)"
    )
    parser.add_argument(
        "--calibration", type=Path, help="measured stage times to fit (CSV or JSON)"
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        help="weights, matmuls and dispatch (default: the profile's compute_dtype)",
    )
    parser.add_argument(
        "--kv-dtype",
        choices=DTYPES,
        default="bf16",
        help="KV cache and attention core (default: bf16)",
    )
    parser.add_argument(
        "--max-attention", type=int, default=16, help="most attention instances"
    )
    parser.add_argument("--max-ffn", type=int, default=8, help="most FFN instances")
    parser.add_argument(
        "--micro-batches",
        type=_ints,
        default=(1, 2, 3, 4),
        help="micro-batch counts to try (default: 1,2,3,4)",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=1 << 16,
        help="most sequences per attention instance per micro-batch",
    )
    parser.add_argument(
        "--evaluate",
        type=_shape,
        metavar="A:F",
        help="only this many attention and FFN instances (overrides --max-attention "
        "and --max-ffn)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        help="sequences per attention instance per micro-batch, fixed: predict "
        "at this batch instead of searching the largest that meets --tpot-ms",
    )
    parser.add_argument(
        "--memory-fraction",
        type=float,
        default=0.9,
        help="share of device memory the roles may use (default: 0.9)",
    )
    parser.add_argument("--top", type=int, default=10, help="plans to list")
    parser.add_argument("--json", action="store_true", help="JSON on stdout")
    parser.add_argument(
        "--root", type=Path, default=None, help="repository root (scenario ids)"
    )
    parser.add_argument(
        "--model-root",
        type=Path,
        default=None,
        help="where hub models live (scenario ids of hub models)",
    )


def _range_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    for flag, value in (
        ("--max-attention", args.max_attention),
        ("--max-ffn", args.max_ffn),
        ("--max-batch", args.max_batch),
        ("--top", args.top),
    ):
        if value < 1:
            problems.append(f"{flag} must be at least 1, got {value}")
    if args.batch is not None and not 1 <= args.batch <= args.max_batch:
        problems.append(
            f"--batch must be between 1 and --max-batch ({args.max_batch}), "
            f"got {args.batch}"
        )
    if not 0 < args.memory_fraction <= 1:
        problems.append(
            f"--memory-fraction must be in (0, 1], got {args.memory_fraction:g}"
        )
    return problems


def run(args: argparse.Namespace) -> int:
    from afd_e2e.plan.planner import PlanRequest, make_plan
    from afd_e2e.plan.report import as_json, text

    request = PlanRequest(
        model=args.model,
        hardware=args.hardware,
        tpot_ms=args.tpot_ms,
        context=args.context,
        trace=args.trace,
        calibration=args.calibration,
        dtype=args.dtype,
        kv_dtype=args.kv_dtype,
        max_attention=args.max_attention,
        max_ffn=args.max_ffn,
        micro_batches=args.micro_batches,
        max_batch=args.max_batch,
        evaluate=args.evaluate,
        batch=args.batch,
        memory_fraction=args.memory_fraction,
        top=args.top,
        root=args.root,
        model_root=args.model_root,
    )
    problems = _range_problems(args)
    report = None
    try:
        report = make_plan(request)
    except PlanInputError as exc:
        problems += exc.problems
    if problems:
        for problem in problems:
            print(f"afd-e2e plan: {problem}", file=sys.stderr)
        return BAD_INPUT
    assert report is not None
    if args.json:
        print(json.dumps(as_json(report), indent=2))
    else:
        print(text(report), end="")
    if report.result.recommended is None:
        print("afd-e2e plan: no plan meets the TPOT target", file=sys.stderr)
        return NO_PLAN
    return 0
