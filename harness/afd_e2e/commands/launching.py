# SPDX-License-Identifier: Apache-2.0
"""What ``afd-e2e run`` and ``afd-e2e bench`` check before they start a server:
the scenario loads and passes the rules, its plan builds, this build holds what
it needs, vLLM is installed, its tiny model exists. Each refusal names why and
says that nothing was started."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from afd_e2e.commands.common import add_root, load
from afd_e2e.define.rules import build_gaps
from afd_e2e.define.scenario import Scenario
from afd_e2e.engines.base import Engine, EngineError
from afd_e2e.launch.plan import LaunchPlan, build_plan
from afd_plugin.errors import AFDConfigError

BAD_INPUT = 2
VLLM_INSTALL = {
    "cpu": "the cpu extra (pip install -e '.[cpu,eval]')",
    "cuda": "the cuda extra (pip install -e '.[cuda,eval]')",
    "npu": "vLLM 0.32.0 with vllm-ascend, then pip install -e '.[eval]'",
}


class Refused(Exception):
    """The command must not start anything; the message says why. ``located``
    messages are ``file:line:col: ...`` lines, printed as they are."""

    def __init__(self, message: str, *, located: bool = False) -> None:
        super().__init__(message)
        self.located = located


@dataclass(frozen=True)
class Launchable:
    scenario: Scenario
    plan: LaunchPlan


DEFAULT_SCENARIO = "cpu-eager-1a1f"
"""The main job: what ``run`` and ``bench`` launch without a scenario id."""


def add_launch_arguments(
    parser: argparse.ArgumentParser, default: str = DEFAULT_SCENARIO
) -> None:
    add_root(parser)
    parser.add_argument(
        "scenario", nargs="?", default=default, help=f"scenario id (default: {default})"
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


def model_root(args: argparse.Namespace) -> Path:
    if args.model_root is not None:
        return args.model_root
    from afd_e2e.tiny_model import default_root

    return default_root()


def plan_scenario(
    args: argparse.Namespace,
    *,
    baseline: bool = False,
    engine: Engine | None = None,
    dry_run: bool = False,
) -> Launchable:
    """The scenario and its launch plan, its nodes resolved by ``engine``
    (default: all on loopback); raises ``Refused`` on bad input."""
    cat = load(args)
    loaded = cat.loaded.get(args.scenario)
    if loaded is None:
        raise Refused(
            f"no scenario {args.scenario!r}; known: {', '.join(sorted(cat.loaded))}"
        )
    problems = [
        e
        for e in cat.errors
        if e.file == loaded.source.display
        or (loaded.parent and e.file == loaded.parent.display)
    ]
    if loaded.scenario is None or problems:
        raise Refused(
            "\n".join(str(e) for e in problems or loaded.errors), located=True
        )
    try:
        nodes = (
            None
            if engine is None
            else engine.node_addresses(loaded.scenario, dry_run=dry_run)
        )
        plan = build_plan(
            args.scenario,
            loaded.scenario,
            model_root=model_root(args),
            run_dir=args.run_dir,
            baseline=baseline,
            nodes=nodes,
        )
    except (AFDConfigError, EngineError) as exc:
        raise Refused(str(exc)) from None
    return Launchable(loaded.scenario, plan)


def ready_to_start(args: argparse.Namespace, launchable: Launchable) -> None:
    """Everything the servers need before the first starts; raises ``Refused``."""
    scenario, plan = launchable.scenario, launchable.plan
    gaps = build_gaps(scenario)
    if gaps:
        raise Refused(
            f"{args.scenario} needs what is not in this build"
            + (f" (it awaits {scenario.awaits})" if scenario.awaits else "")
            + "; nothing was started:\n  "
            + "\n  ".join(gaps)
        )
    if importlib.util.find_spec("vllm") is None:
        raise Refused(
            f"{args.scenario} starts vLLM servers, but vLLM is not installed in "
            f"this environment; install {VLLM_INSTALL[scenario.backend]} (or use "
            "tox -e main); nothing was started"
        )
    if scenario.model.tiny is not None:
        from afd_e2e.tiny_model import TinyModelError, build_tiny_model

        try:
            built = build_tiny_model(scenario.model.tiny.arch, model_root(args))
        except TinyModelError as exc:
            raise Refused(f"{exc}; nothing was started") from None
        assert str(built) == plan.model_path, (built, plan.model_path)


def refuse(command: str, exc: Refused) -> int:
    print(exc if exc.located else f"afd-e2e {command}: {exc}", file=sys.stderr)
    return BAD_INPUT
