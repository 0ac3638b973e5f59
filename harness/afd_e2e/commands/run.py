# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e run [ID]``: plan, launch, check and tear down one scenario.

``--dry-run`` prints the launch plan and starts nothing. The servers' output
goes to their log files in the run directory; ``--stream-logs`` prints it too.
"""

from __future__ import annotations

import argparse
import json

from afd_e2e.commands.engine_args import add_engine_arguments, open_engine
from afd_e2e.commands.launching import (
    Refused,
    add_launch_arguments,
    plan_scenario,
    ready_to_start,
    refuse,
)
from afd_e2e.engines.base import EngineError
from afd_e2e.launch.plan import describe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_launch_arguments(parser)
    add_engine_arguments(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the launch plan; start nothing"
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="after the checks, print endpoints and wait for Ctrl-C",
    )
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    parser.add_argument(
        "--stream-logs",
        action="store_true",
        help="also print every server's output, each line prefixed [role:rank] "
        "(it is always in the run directory's <role>-<rank>.log)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        engine = open_engine(args)
    except EngineError as exc:
        return refuse("run", Refused(str(exc)))
    try:
        try:
            launchable = plan_scenario(args, engine=engine, dry_run=args.dry_run)
            if args.dry_run:
                plan = launchable.plan
                if args.json:
                    print(json.dumps(plan.to_dict(), indent=2))
                else:
                    print(describe(plan, engine.name))
                    where = getattr(engine, "describe_nodes", None)
                    for line in where() if where else []:
                        print(line)
                return 0
            ready_to_start(args, launchable)
        except Refused as exc:
            return refuse("run", exc)
        from afd_e2e.runner import RunOptions, execute

        return execute(
            launchable.plan,
            launchable.scenario,
            RunOptions(
                json=args.json,
                stream_logs=args.stream_logs,
                keep_running=args.keep_running,
            ),
            engine,
        )
    finally:
        engine.close()
