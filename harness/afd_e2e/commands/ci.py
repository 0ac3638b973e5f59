# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e ci render``: write the CI gate lists from the scenarios' tiers."""

from __future__ import annotations

import argparse
import sys

from afd_e2e.commands.common import add_root, load
from afd_e2e.publish.gates import render_lists


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("action", choices=["render"])
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a file differs from its rendering; write nothing",
    )


def run(args: argparse.Namespace) -> int:
    cat = load(args)
    if cat.errors:
        for err in cat.errors:
            print(err, file=sys.stderr)
        return 1
    differ = []
    for rel, text in render_lists(cat.scenarios()).items():
        path = cat.root / rel
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        differ.append(rel)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "differ" if args.check else "written"
    print(f"{verb}: {', '.join(differ)}" if differ else "CI lists match the scenarios")
    return 1 if args.check and differ else 0
