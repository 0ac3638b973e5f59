# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e lint``: scenarios, CI gate lists, Buildkite schema, generated docs.

Prints ``file:line: message`` with the fix for each problem; exit 1 if any.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from afd_e2e.commands.common import add_root, load
from afd_e2e.publish.doc_tables import all_blocks, stale_blocks
from afd_e2e.publish.gates import discover_lists, lint_lists, schema_problems

SCHEMA_ENV = "AFD_BUILDKITE_SCHEMA"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument(
        "--buildkite-schema",
        type=Path,
        default=None,
        help=f"Buildkite pipeline JSON schema to check ci/ against (or ${SCHEMA_ENV})",
    )


def run(args: argparse.Namespace) -> int:
    cat = load(args)
    root = cat.root
    problems = [str(e) for e in cat.errors]
    positions = {sid: loaded.source.display for sid, loaded in cat.loaded.items()}
    problems += lint_lists(root, cat.scenarios(), positions)
    schema = args.buildkite_schema or (
        Path(os.environ[SCHEMA_ENV]) if os.environ.get(SCHEMA_ENV) else None
    )
    if schema is not None:
        problems += schema_problems(root, schema, discover_lists(root))
    if not cat.errors:
        problems += stale_blocks(root, all_blocks(root))
    for line in problems:
        print(line, file=sys.stderr)
    checked = f"{len(cat.loaded)} scenarios, {len(discover_lists(root))} CI lists"
    if schema is not None:
        checked += ", Buildkite schema"
    if problems:
        print(f"afd-e2e lint: {len(problems)} problem(s) ({checked})", file=sys.stderr)
        return 1
    print(f"afd-e2e lint: ok ({checked})")
    return 0
