# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e docs``: check (default) or rewrite the generated doc tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from afd_e2e.publish.doc_tables import all_blocks, stale_blocks, write_blocks
from afd_e2e.repo import find_root


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--write", action="store_true", help="rewrite stale blocks")
    parser.add_argument("--root", type=Path, default=None, help="repository root")


def run(args: argparse.Namespace) -> int:
    root = args.root or find_root()
    blocks = all_blocks(root)
    if args.write:
        changed = write_blocks(root, blocks)
        print(
            "updated: " + ", ".join(changed)
            if changed
            else "all generated tables up to date"
        )
        return 0
    problems = stale_blocks(root, blocks)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0
