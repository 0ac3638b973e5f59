# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e bench [ID]``: vLLM's serving benchmark against the scenario's
colocated baseline, then its AFD deployment; ``bench.json``, a side-by-side
table and, with the bench extra, a PNG in the run directory. With
``--profile``: the AFD deployment alone, its step timing under a steady
decode load per concurrency, and ``calibration.csv`` for ``afd-e2e plan``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TypeVar

from afd_e2e.bench.options import BenchOptions
from afd_e2e.bench.profile_options import ProfileOptions
from afd_e2e.commands.launching import (
    BAD_INPUT,
    Refused,
    add_launch_arguments,
    plan_scenario,
    ready_to_start,
    refuse,
)
from afd_e2e.define.scenario import Scenario
from afd_plugin.connectors.registry import AFDConnectorFactory

T = TypeVar("T")
DEFAULTS = BenchOptions()
PROFILE_DEFAULTS = ProfileOptions()
INTERRUPTED = 130
NOT_PROFILED = ("--output-len", "--num-prompts")
"""Serving-benchmark flags that mean nothing to ``--profile``."""


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
        default=None,
        help="max concurrency of each run, comma-separated (default: 1,8,32; "
        "with --profile the batch sizes to measure, default: 1,2,4,8,16)",
    )
    for flag, field, what in (
        ("--input-len", "input_len", "prompt tokens"),
        ("--output-len", "output_len", "generated tokens per request"),
        ("--num-prompts", "num_prompts", "requests per run"),
        ("--seed", "seed", "dataset seed"),
    ):
        default = getattr(DEFAULTS, field)
        parser.add_argument(
            flag, type=int, default=None, help=f"{what} (default: {default})"
        )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULTS.timeout_s,
        help="kill one benchmark run after this long "
        f"(default: {DEFAULTS.timeout_s:g})",
    )
    parser.add_argument("--json", action="store_true", help="bench.json on stdout too")
    profile = parser.add_argument_group(
        "calibration (--profile)",
        "Measure per-layer attention, FFN and exchange times of a 1A1F AFD "
        "deployment under a steady decode load at each --concurrency (streams of "
        "--input-len prompt tokens); writes calibration.csv for afd-e2e plan "
        "--calibration and profile.json (the raw AFD_STEP_TIMING lines). "
        "--timeout-s bounds each concurrency's window.",
    )
    profile.add_argument(
        "--profile",
        action="store_true",
        help="calibrate instead of benchmarking (no colocated baseline)",
    )
    profile.add_argument(
        "--timing-window",
        type=int,
        default=PROFILE_DEFAULTS.timing_window,
        help="steps per AFD_STEP_TIMING line "
        f"(default: {PROFILE_DEFAULTS.timing_window})",
    )
    profile.add_argument(
        "--profile-windows",
        type=int,
        default=PROFILE_DEFAULTS.windows,
        help="timing lines measured per concurrency "
        f"(default: {PROFILE_DEFAULTS.windows})",
    )


def _pick(value: T | None, default: T) -> T:
    """The flag's value, or the default of the mode when it was not given."""
    return default if value is None else value


def run(args: argparse.Namespace) -> int:
    if args.profile:
        return _profile(args)
    options = BenchOptions(
        concurrency=_pick(args.concurrency, DEFAULTS.concurrency),
        input_len=_pick(args.input_len, DEFAULTS.input_len),
        output_len=_pick(args.output_len, DEFAULTS.output_len),
        num_prompts=_pick(args.num_prompts, DEFAULTS.num_prompts),
        seed=_pick(args.seed, DEFAULTS.seed),
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
    if report.interrupted_by:
        return INTERRUPTED
    return 1 if report.errors else 0


def _profile_refusal(scenario: Scenario) -> str | None:
    """Why ``--profile`` cannot measure this scenario, or None. A 1A1F
    scenario with two micro-batches is measured (the overlap of its roles)
    but gives no calibration rows: the planner's stages are per
    micro-batch, measured with one."""
    if not scenario.afd or scenario.connector is None:
        return "is not an AFD scenario: there is nothing to calibrate"
    ffn = scenario.topology.ffn
    shape = (scenario.topology.attention.ranks, ffn.ranks if ffn else 0)
    if shape != (1, 1):
        return (
            f"runs {shape[0]}A{shape[1]}F; a calibration is measured on 1A1F "
            "(afd_e2e/plan_profiles/README.md)"
        )
    if not AFDConnectorFactory.get_spec(scenario.connector.name).has_control_plane:
        return (
            f"uses {scenario.connector.name}, which has no control plane: its FFN "
            "role times dispatches, not steps"
        )
    return None


def _profile(args: argparse.Namespace) -> int:
    options = ProfileOptions(
        concurrency=_pick(args.concurrency, PROFILE_DEFAULTS.concurrency),
        input_len=_pick(args.input_len, PROFILE_DEFAULTS.input_len),
        timing_window=args.timing_window,
        windows=args.profile_windows,
        seed=_pick(args.seed, PROFILE_DEFAULTS.seed),
        timeout_s=args.timeout_s,
    )
    errors = options.errors()
    given = {"--output-len": args.output_len, "--num-prompts": args.num_prompts}
    errors += [
        f"{flag}: does not apply to --profile (streams run until their window ends)"
        for flag in NOT_PROFILED
        if given[flag] is not None
    ]
    if errors:
        lines = "\n  ".join(["bad options:", *errors])
        print(f"afd-e2e bench: {lines}", file=sys.stderr)
        return BAD_INPUT
    try:
        launchable = plan_scenario(args)
        why = _profile_refusal(launchable.scenario)
        if why:
            raise Refused(f"--profile: {args.scenario} {why}; nothing was started")
        ready_to_start(args, launchable)
    except Refused as exc:
        return refuse("bench", exc)
    from afd_e2e.bench.profile_run import run_profile, write_outputs
    from afd_e2e.plan.calibration import load_calibration
    from afd_e2e.plan.types import PlanInputError

    plan = launchable.plan
    report = run_profile(plan, launchable.scenario, options)
    csv_path, json_path = write_outputs(report, plan.run_dir)
    for line in report.warnings:
        print(f"afd-e2e bench: WARNING {line}", file=sys.stderr)
    for line in report.errors:
        print(f"afd-e2e bench: FAIL {line}", file=sys.stderr)
    for problem in report.teardown:
        print(f"afd-e2e bench: afd teardown: {problem}", file=sys.stderr)
    try:
        fits = load_calibration(csv_path)
    except PlanInputError as exc:
        fits = None
        for problem in exc.problems:
            print(f"afd-e2e bench: FAIL calibration: {problem}", file=sys.stderr)
    if fits is not None:
        for name in ("attention", "ffn", "exchange"):
            fit = getattr(fits, name)
            print(
                f"fit {name}: {fit.slope * 1e6:.3f} us per sequence + "
                f"{fit.intercept * 1e6:.1f} us per layer",
                file=sys.stderr,
            )
    print(f"results: {csv_path}, {json_path}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    if report.teardown:
        return 3
    if report.interrupted_by:
        return INTERRUPTED
    return 1 if report.errors or fits is None else 0
