# SPDX-License-Identifier: Apache-2.0
"""Patch: the ZMQ socket context that vLLM's engine start-up runs in
(``vllm.v1.engine.utils.zmq_socket_ctx``, vLLM 0.32.0).

What: replaces the name ``launch_core_engines`` uses with a context manager
that opens the same socket but lets a ``KeyboardInterrupt`` through.
Why: the API server turns SIGTERM into ``KeyboardInterrupt`` until uvicorn
runs ("interrupt initialization"), but vLLM's ``zmq_socket_ctx`` catches and
drops it. A server with several data-parallel engines that is told to stop
while its engines start (its FFN peer failed, an orchestrator gives up) then
goes on to wait for engines that are already gone, for
``VLLM_ENGINE_READY_TIMEOUT_S`` (600 s), and only SIGKILL ends it. AFD roles
wait on their peers during start-up, so they meet this often.
vLLM version: 0.32.0 (``check_target`` fails when the function is gone, its
parameters changed, or it no longer drops the interrupt).
Delete when: vLLM's ``zmq_socket_ctx`` re-raises ``KeyboardInterrupt``.
Applied: scoped, by ``config_validation`` when a process's config holds an
AFD role (before its engines start); never at ``register()`` and never in a
process without AFD.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

MODULE = "vllm.v1.engine.utils"
TARGET = "zmq_socket_ctx"
EXPECTED_PARAMETERS = (
    "path",
    "socket_type",
    "bind",
    "linger",
    "identity",
    "router_handover",
)
_MARK = "__afd_startup_interrupt__"


def _target() -> Callable[..., Any]:
    import importlib

    from vllm import __version__ as vllm_version

    module = importlib.import_module(MODULE)
    original = getattr(module, TARGET, None)
    where = f"vLLM {vllm_version}: {MODULE}.{TARGET}"
    fix = "afd_plugin.patches.startup_interrupt needs an update"
    if original is None:
        raise RuntimeError(f"{where} is gone; {fix}")
    if getattr(original, _MARK, False):
        return original.__wrapped__
    parameters = tuple(inspect.signature(original).parameters)
    if parameters != EXPECTED_PARAMETERS:
        raise RuntimeError(
            f"{where} takes {parameters}, expected {EXPECTED_PARAMETERS}; {fix}"
        )
    if "except KeyboardInterrupt" not in inspect.getsource(original):
        raise RuntimeError(
            f"{where} no longer catches KeyboardInterrupt; delete this patch"
        )
    return original


def check_target() -> None:
    """Raise when vLLM's target drifted (or was fixed)."""
    _target()


def interrupt_passing(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original``'s context, with a ``KeyboardInterrupt`` raised in its body
    re-raised once the socket is closed instead of dropped."""

    @contextlib.contextmanager
    def zmq_socket_ctx(*args: Any, **kwargs: Any) -> Iterator[Any]:
        interrupted: KeyboardInterrupt | None = None
        with original(*args, **kwargs) as sock:
            try:
                yield sock
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted

    setattr(zmq_socket_ctx, _MARK, True)
    zmq_socket_ctx.__wrapped__ = original  # type: ignore[attr-defined]
    return zmq_socket_ctx


def apply() -> None:
    """Install the interrupt-passing context (idempotent)."""
    import importlib

    module = importlib.import_module(MODULE)
    if getattr(getattr(module, TARGET), _MARK, False):
        return
    setattr(module, TARGET, interrupt_passing(_target()))
