# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e list``: scenarios as a table or JSON, filtered by tier/backend."""

from __future__ import annotations

import argparse
import json
from typing import get_args

from afd_e2e.commands.common import add_root, load
from afd_e2e.define.scenario import Tier


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("--tier", choices=get_args(Tier))
    parser.add_argument("--backend", choices=["cpu", "cuda", "npu"])
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    cat = load(args)
    rows = [
        (sid, s)
        for sid, s in cat.scenarios().items()
        if (args.tier is None or s.tier == args.tier)
        and (args.backend is None or s.backend == args.backend)
    ]
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": sid,
                        "backend": s.backend,
                        "tier": s.tier,
                        "shape": s.shape,
                        "devices": s.devices,
                        "description": s.description,
                    }
                    for sid, s in rows
                ],
                indent=2,
            )
        )
        return 0
    width = max((len(sid) for sid, _ in rows), default=2)
    print(f"{'ID':{width}}  BACKEND  TIER     SHAPE            DESCRIPTION")
    for sid, s in rows:
        print(
            f"{sid:{width}}  {s.backend:7}  {s.tier:7}  {s.shape:15}  {s.description}"
        )
    return 0
