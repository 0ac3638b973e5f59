# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e model tiny``: build a tiny local model and print its directory.

Needs torch, transformers and tokenizers (the ``cpu`` extra); nothing downloads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from afd_e2e.tiny_model import ARCHS, DEFAULT_ROOT_ENV, TinyModelError, build_tiny_model

BAD_ENVIRONMENT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model_command", metavar="KIND", required=True)
    tiny = sub.add_parser("tiny", help="build (or reuse) a tiny random-weight model")
    tiny.add_argument("--arch", choices=ARCHS, required=True)
    tiny.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"cache root (default: ${DEFAULT_ROOT_ENV} or ~/.cache/afd-e2e/models)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        path = build_tiny_model(args.arch, args.out)
    except TinyModelError as exc:
        print(f"afd-e2e model tiny: {exc}", file=sys.stderr)
        return BAD_ENVIRONMENT
    print(path)
    return 0
