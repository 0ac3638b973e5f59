# SPDX-License-Identifier: Apache-2.0
"""Cost of importing the plugin's pure core, as a ratio to a bare interpreter.

Both are measured in the same run, interleaved, median of N fresh processes.
Usage: python benchmarks/import_cost.py [--runs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CASES = {
    "bare interpreter": "pass",
    "import afd_plugin (register entry point)": "import afd_plugin",
    "afd_plugin.register()": "import afd_plugin; afd_plugin.register()",
    "pure core (config+validation+wire+topology)": (
        "import afd_plugin.validation, afd_plugin.wire, afd_plugin.topology, "
        "afd_plugin.worker_selection"
    ),
    "afd-e2e --help": "import sys; sys.argv=['afd-e2e','--help'];"
    " from afd_e2e.cli import build_parser; build_parser()",
}


def once(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, code in CASES.items():  # interleaved: noise hits all cases alike
            samples[name].append(once(code))
    base = statistics.median(samples["bare interpreter"])
    print(f"{'case':48} {'median ms':>10} {'ratio':>7}")
    results = {}
    for name, values in samples.items():
        median = statistics.median(values)
        results[name] = {"median_s": median, "ratio": median / base}
        print(f"{name:48} {median * 1000:10.1f} {median / base:7.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"runs": args.runs, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
