# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e run [ID]``: plan, launch, check and tear down one scenario.

``--dry-run`` prints the launch plan and starts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from afd_e2e.commands.common import add_root, load
from afd_e2e.launch import build_plan, describe
from afd_e2e.rules import build_gaps
from afd_plugin.errors import AFDConfigError

DEFAULT_SCENARIO = "cpu-eager-1a1f"
BAD_INPUT = 2
VLLM_INSTALL = {
    "cpu": "the cpu extra (pip install -e '.[cpu,eval]')",
    "cuda": "the cuda extra (pip install -e '.[cuda,eval]')",
    "npu": "vLLM 0.32.0 with vllm-ascend, then pip install -e '.[eval]'",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument(
        "scenario",
        nargs="?",
        default=DEFAULT_SCENARIO,
        help=f"scenario id (default: {DEFAULT_SCENARIO})",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the launch plan; start nothing"
    )
    parser.add_argument(
        "--model-root",
        type=Path,
        default=None,
        help="where hub models live and tiny models are cached "
        "(default: $AFD_E2E_MODELS or ~/.cache/afd-e2e/models)",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="logs and results (default: runs/<run-id>)",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="after the checks, print endpoints and wait for Ctrl-C",
    )
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")


def _model_root(args: argparse.Namespace) -> Path:
    if args.model_root is not None:
        return args.model_root
    from afd_e2e.tiny_model import default_root

    return default_root()


def run(args: argparse.Namespace) -> int:
    cat = load(args)
    loaded = cat.loaded.get(args.scenario)
    if loaded is None:
        print(
            f"afd-e2e run: no scenario {args.scenario!r}; known: "
            f"{', '.join(sorted(cat.loaded))}",
            file=sys.stderr,
        )
        return BAD_INPUT
    problems = [
        e
        for e in cat.errors
        if e.file == loaded.source.display
        or (loaded.parent and e.file == loaded.parent.display)
    ]
    if loaded.scenario is None or problems:
        for err in problems or loaded.errors:
            print(err, file=sys.stderr)
        return BAD_INPUT
    scenario = loaded.scenario
    try:
        plan = build_plan(
            args.scenario, scenario, model_root=_model_root(args), run_dir=args.run_dir
        )
    except AFDConfigError as exc:
        print(f"afd-e2e run: {exc}", file=sys.stderr)
        return BAD_INPUT
    if args.dry_run:
        if args.json:
            print(json.dumps(plan.to_dict(), indent=2))
        else:
            print(describe(plan))
        return 0
    gaps = build_gaps(scenario)
    if gaps:
        print(
            f"afd-e2e run: {args.scenario} needs what is not in this build"
            + (f" (it awaits {scenario.awaits})" if scenario.awaits else "")
            + "; nothing was started:\n  "
            + "\n  ".join(gaps),
            file=sys.stderr,
        )
        return BAD_INPUT
    if importlib.util.find_spec("vllm") is None:
        print(
            f"afd-e2e run: {args.scenario} starts vLLM servers, but vLLM is not "
            f"installed in this environment; install {VLLM_INSTALL[scenario.backend]} "
            "(or use tox -e main); nothing was started",
            file=sys.stderr,
        )
        return BAD_INPUT
    if scenario.model.tiny is not None:
        from afd_e2e.tiny_model import TinyModelError, build_tiny_model

        try:
            built = build_tiny_model(scenario.model.tiny.arch, _model_root(args))
        except TinyModelError as exc:
            print(f"afd-e2e run: {exc}; nothing was started", file=sys.stderr)
            return BAD_INPUT
        assert str(built) == plan.model_path, (built, plan.model_path)
    from afd_e2e.runner import RunOptions, execute

    return execute(
        plan, scenario, RunOptions(json=args.json, keep_running=args.keep_running)
    )
