# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e show <id>``: the fully resolved scenario (``extends`` applied)."""

from __future__ import annotations

import argparse
import sys

import yaml

from afd_e2e.commands.common import add_root, load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("scenario", help="scenario id (its file name)")


def run(args: argparse.Namespace) -> int:
    cat = load(args)
    loaded = cat.loaded.get(args.scenario)
    if loaded is None:
        print(
            f"afd-e2e show: no scenario {args.scenario!r}; known: "
            f"{', '.join(sorted(cat.loaded))}",
            file=sys.stderr,
        )
        return 2
    if loaded.scenario is None:
        for err in loaded.errors:
            print(err, file=sys.stderr)
        return 2
    resolved = {"id": args.scenario, **loaded.scenario.model_dump(mode="json")}
    print(yaml.safe_dump(resolved, sort_keys=False, width=100), end="")
    return 0
