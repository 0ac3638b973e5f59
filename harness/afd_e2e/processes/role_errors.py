# SPDX-License-Identifier: Apache-2.0
"""Why a run lost a role server: it could not start, it died, or it was not
ready in time. Every engine raises these; the runner reports the message
(which quotes the role's log tail) as the run's error."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["ProcessDiedError", "ReadinessTimeoutError", "RoleError"]


class RoleError(RuntimeError):
    """A role process could not start, died, or did not become ready."""

    def __init__(self, message: str, names: Sequence[str]) -> None:
        super().__init__(message)
        self.names = tuple(names)
        """The ``role:rank`` names at fault."""


class ProcessDiedError(RoleError):
    """A role process exited while the run still needed it."""

    def __init__(
        self, name: str, returncode: int, log_path: Path, tail: list[str], message: str
    ) -> None:
        super().__init__(message, [name])
        self.returncode = returncode
        self.log_path = log_path
        self.log_tail = tail


class ReadinessTimeoutError(RoleError):
    """The readiness deadline passed with some role not serving."""
