# SPDX-License-Identifier: Apache-2.0
"""Route the ``afd_plugin`` logger into vLLM's logger, so AFD lines appear in
a server's log with vLLM's format and process prefix.
"""

from __future__ import annotations

import logging


class _ToVllm(logging.Handler):
    """Hands records to the ``vllm`` logger's handlers at emit time, so it
    keeps working when vLLM (re)configures its logging later."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger("vllm").handle(record)


def use_vllm_handlers() -> None:
    """Idempotent; leaves a plugin logger that already has handlers alone."""
    from vllm import envs

    plugin = logging.getLogger("afd_plugin")
    if plugin.handlers:
        return
    plugin.addHandler(_ToVllm())
    plugin.setLevel(envs.VLLM_LOGGING_LEVEL)
    plugin.propagate = False
