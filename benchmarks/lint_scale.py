# SPDX-License-Identifier: Apache-2.0
"""Lint time for 1,000 generated scenarios and their CI lists, as a ratio to
loading the same YAML files alone (measured in the same run).

Usage: python benchmarks/lint_scale.py [--scenarios N] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from afd_e2e.define.catalogue import Catalogue
from afd_e2e.publish.gates import discover_lists, lint_lists, render_lists

try:
    from yaml import CSafeLoader as Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as Loader  # type: ignore[assignment]

BASE = """schema_version: 1
description: generated case {i}
backend: cuda
tier: {tier}
model: {{hub_id: org/model-{i}, architecture: DeepseekV2ForCausalLM}}
connector: {{name: P2pNcclAFDConnector}}
topology:
  attention: {{dp: 2, tp: 1, ep: true, devices: [0, 1]}}
  ffn: {{dp: {f}, tp: 1, ep: true, devices: {fdev}}}
roles:
  common: {{args: [--max-model-len, "4096"], env: {{A: "1"}}}}
checks:
  gsm8k: {{samples: 200, threshold: 0.3, concurrency: 8, fewshot: 8}}
"""
CHILD = """extends: gen-{parent}
description: generated child {i}
graph: {{mode: FULL_DECODE_ONLY, capture_sizes: [1, 2, 4]}}
"""


def generate(root: Path, count: int) -> None:
    (root / "scenarios" / "cuda").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    for i in range(count):
        path = root / "scenarios" / "cuda" / f"gen-{i:04d}.yaml"
        if i % 2 and i > 0:
            path.write_text(CHILD.format(parent=f"{i - 1:04d}", i=i))
        else:
            pr = i % 4 == 0
            path.write_text(
                BASE.format(
                    i=i,
                    tier="pr" if pr else "weekly",
                    f=2 if pr else 1,
                    fdev="[2, 3]" if pr else "[2]",
                )
            )
    catalogue = Catalogue.load(root)
    assert not catalogue.errors, catalogue.errors[:3]
    for rel, text in render_lists(catalogue.scenarios()).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def load_only(root: Path) -> None:
    for path in sorted(root.rglob("*.yml")) + sorted(
        (root / "scenarios").rglob("*.yaml")
    ):
        yaml.load(path.read_text(), Loader=Loader)


def lint(root: Path) -> None:
    catalogue = Catalogue.load(root)
    positions = {i: s.source.display for i, s in catalogue.loaded.items()}
    problems = lint_lists(root, catalogue.scenarios(), positions)
    assert not problems and not catalogue.errors, problems[:3]
    assert discover_lists(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenarios", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, args.scenarios)
        base, full = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            load_only(root)
            base.append(time.perf_counter() - start)
            start = time.perf_counter()
            lint(root)
            full.append(time.perf_counter() - start)
    b, f = statistics.median(base), statistics.median(full)
    print(f"scenarios: {args.scenarios} (+3 CI lists), repeats: {args.repeat}")
    print(f"YAML load alone : {b * 1000:8.1f} ms")
    print(f"afd-e2e lint    : {f * 1000:8.1f} ms")
    print(f"ratio lint/load : {f / b:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
