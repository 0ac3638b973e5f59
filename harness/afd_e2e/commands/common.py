# SPDX-License-Identifier: Apache-2.0
"""Arguments and helpers shared by the scenario subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path

from afd_e2e.define.catalogue import Catalogue
from afd_e2e.repo import find_root


def add_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="repository root (default: found from the working directory)",
    )


def load(args: argparse.Namespace) -> Catalogue:
    return Catalogue.load(args.root or find_root())
