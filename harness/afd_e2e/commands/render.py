# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e render ID --engine k8s [-o FILE]``: a scenario's launch plan as
Kubernetes manifests (``afd_e2e.render.k8s``); nothing is applied or started.

Refused, exit 2, naming the scenario: an unknown id, a scenario that breaks a
rule, one that needs what this build lacks, a shape the renderer cannot run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from afd_e2e.commands.common import add_root, load
from afd_e2e.define.rules import build_gaps
from afd_e2e.render import RENDER_ENGINES
from afd_e2e.render.k8s import K8sOptions, RenderError, render_k8s
from afd_plugin.errors import AFDConfigError

BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("scenario", help="scenario id (its file name)")
    parser.add_argument(
        "--engine",
        choices=RENDER_ENGINES,
        default="k8s",
        help="what to render for: k8s (one LeaderWorkerSet per role, its "
        "Services; default)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the manifests here (default: stdout)",
    )
    defaults = K8sOptions()
    parser.add_argument(
        "--image",
        default=None,
        help="container image with vLLM and afd-plugin (default: afd-plugin:<backend>)",
    )
    parser.add_argument(
        "--model-root",
        default=defaults.model_root,
        help=f"where the pods mount the models volume (default: {defaults.model_root})",
    )
    parser.add_argument(
        "--models-pvc",
        default=defaults.models_pvc,
        help="PersistentVolumeClaim holding the weights (default: "
        f"{defaults.models_pvc})",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="name prefix of every object, a DNS label (default: the scenario id, "
        "prefixed afd- unless it is)",
    )
    parser.add_argument(
        "--node-cpus",
        type=int,
        default=defaults.node_cpus,
        help="CPUs per node, for a CPU scenario's thread share (default: "
        f"{defaults.node_cpus})",
    )


def _refuse(message: str) -> int:
    print(f"afd-e2e render: {message}", file=sys.stderr)
    return BAD_INPUT


def run(args: argparse.Namespace) -> int:
    cat = load(args)
    sid = args.scenario
    loaded = cat.loaded.get(sid)
    if loaded is None:
        return _refuse(f"no scenario {sid!r}; known: {', '.join(sorted(cat.loaded))}")
    problems = [
        e
        for e in cat.errors
        if e.file == loaded.source.display
        or (loaded.parent and e.file == loaded.parent.display)
    ]
    if loaded.scenario is None or problems:
        for err in problems or loaded.errors:
            print(err, file=sys.stderr)
        return _refuse(f"{sid} breaks the rules above; nothing was rendered")
    scenario = loaded.scenario
    gaps = build_gaps(scenario)
    if gaps:
        return _refuse(
            f"{sid} needs what is not in this build; nothing was rendered:\n  "
            + "\n  ".join(gaps)
        )
    if args.node_cpus < 1:
        return _refuse(f"{sid}: --node-cpus must be >= 1, got {args.node_cpus}")
    options = K8sOptions(
        image=args.image,
        model_root=args.model_root,
        models_pvc=args.models_pvc,
        name=args.name,
        node_cpus=args.node_cpus,
    )
    try:
        text = render_k8s(sid, scenario, options).to_yaml()
    except RenderError as exc:
        return _refuse(str(exc))
    except AFDConfigError as exc:
        return _refuse(f"{sid}: {exc}")
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"afd-e2e render: wrote {args.output}", file=sys.stderr)
    return 0
