# SPDX-License-Identifier: Apache-2.0
"""The ``afd-e2e`` command line: one subcommand per module in ``commands/``.

Only the chosen subcommand's module is imported (to add its arguments and run
it); the top-level ``--help`` imports none, so it stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

# name -> (module under afd_e2e.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("list_cmd", "list scenarios (table or --json)"),
    "show": ("show", "print one fully resolved scenario"),
    "validate": ("validate", "validate scenario files"),
    "lint": ("lint", "check CI gate lists, scenarios and generated docs"),
    "ci": ("ci", "render the CI gate lists from the scenarios' tiers"),
    "docs": ("docs", "check or regenerate the generated tables in the docs"),
    "run": ("run", "launch a scenario's roles, run its checks, tear down"),
    "gsm8k": ("gsm8k", "GSM8K accuracy gate against an OpenAI-compatible server"),
    "model": ("model", "build tiny local models for CPU scenarios"),
    "bench": ("bench", "vLLM's serving benchmark: AFD vs its colocated baseline"),
    "cluster": ("cluster", "start or stop a local Ray cluster for --engine ray"),
    "render": ("render", "a scenario's launch plan as Kubernetes manifests"),
    "plan": (
        "plan",
        (
            "choose the A:F ratio and micro-batches from the model, hardware "
            "and stage times"
        ),
    ),
}

NOT_AVAILABLE_EXIT = 2


def _module(name: str) -> str:
    return f"afd_e2e.commands.{COMMANDS[name][0]}"


def _available(name: str) -> bool:
    return importlib.util.find_spec(_module(name)) is not None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (default ``sys.argv[1:]``, as argparse's).

    Every subcommand is listed; only the one ``argv`` names gets its arguments.
    """
    chosen = _chosen(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="afd-e2e",
        description="End-to-end harness for afd-plugin: scenarios, CI gates, "
        "launch, checks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        available = _available(name)
        sub_parser = sub.add_parser(
            name,
            help=help_text if available else f"{help_text} (not yet available)",
            description=help_text,
        )
        if not available:
            sub_parser.add_argument("rest", nargs=argparse.REMAINDER)
        elif name == chosen:
            importlib.import_module(_module(name)).add_arguments(sub_parser)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand argparse will pick: the top level takes only ``-h``, so it
    is the first argument that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if not _available(args.command):
        print(
            f"afd-e2e {args.command}: not yet available in this version",
            file=sys.stderr,
        )
        return NOT_AVAILABLE_EXIT
    return int(importlib.import_module(_module(args.command)).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
