# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e bench [ID]``: vLLM's serving benchmark against the scenario's
colocated baseline, then its AFD deployment; ``bench.json``, a side-by-side
table and, with the bench extra, a PNG in the run directory."""

from __future__ import annotations

import argparse
import json
import sys

from afd_e2e.bench.options import BenchOptions
from afd_e2e.commands.launching import (
    BAD_INPUT,
    Refused,
    add_launch_arguments,
    plan_scenario,
    ready_to_start,
    refuse,
)

DEFAULTS = BenchOptions()


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 1,8,32, got {text!r}"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_launch_arguments(parser)
    parser.add_argument(
        "--concurrency",
        type=_ints,
        default=DEFAULTS.concurrency,
        help="max concurrency of each run, comma-separated (default: 1,8,32)",
    )
    for flag, field, what in (
        ("--input-len", "input_len", "prompt tokens"),
        ("--output-len", "output_len", "generated tokens per request"),
        ("--num-prompts", "num_prompts", "requests per run"),
        ("--seed", "seed", "dataset seed"),
    ):
        default = getattr(DEFAULTS, field)
        parser.add_argument(
            flag, type=int, default=default, help=f"{what} (default: {default})"
        )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULTS.timeout_s,
        help="kill one benchmark run after this long "
        f"(default: {DEFAULTS.timeout_s:g})",
    )
    parser.add_argument("--json", action="store_true", help="bench.json on stdout too")


def run(args: argparse.Namespace) -> int:
    options = BenchOptions(
        concurrency=args.concurrency,
        input_len=args.input_len,
        output_len=args.output_len,
        num_prompts=args.num_prompts,
        seed=args.seed,
        timeout_s=args.timeout_s,
    )
    errors = options.errors()
    if errors:
        lines = "\n  ".join(["bad options:", *errors])
        print(f"afd-e2e bench: {lines}", file=sys.stderr)
        return BAD_INPUT
    try:
        launchable = plan_scenario(args, baseline=True)
        if not launchable.scenario.afd:
            raise Refused(f"{args.scenario} is not an AFD scenario: nothing to compare")
        ready_to_start(args, launchable)
    except Refused as exc:
        return refuse("bench", exc)
    from afd_e2e.bench.report import plot, table, write_json, write_summary
    from afd_e2e.bench.run import run_bench

    plan = launchable.plan
    report = run_bench(plan, launchable.scenario, options)
    path = write_json(report, plan.run_dir / "bench.json")
    write_summary(report, plan.run_dir / "bench-summary.json")
    print(table(report), file=sys.stderr)
    for line in report.errors:
        print(f"afd-e2e bench: FAIL {line}", file=sys.stderr)
    for deployment, problems in report.teardown.items():
        for problem in problems:
            print(f"afd-e2e bench: {deployment} teardown: {problem}", file=sys.stderr)
    png = plot(report, plan.run_dir / "bench.png")
    print(f"results: {path}" + (f", {png}" if png else ""), file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    if any(report.teardown.values()):
        return 3
    return 1 if report.errors else 0
