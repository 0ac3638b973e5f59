# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e validate [FILES]``: schema, plugin validator and gate rules."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from afd_e2e.commands.common import add_root
from afd_e2e.define.catalogue import Catalogue
from afd_e2e.repo import find_root


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument(
        "files", nargs="*", type=Path, help="scenario files (default: all)"
    )


def run(args: argparse.Namespace) -> int:
    root = args.root or find_root()
    cat = Catalogue.load(root, args.files or None)
    for err in cat.errors:
        print(err, file=sys.stderr)
    count = len(cat.loaded)
    if cat.errors:
        print(f"{len(cat.errors)} problem(s) in {count} scenario(s)", file=sys.stderr)
        return 1
    print(f"{count} scenario(s) valid")
    return 0
