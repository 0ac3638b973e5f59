# SPDX-License-Identifier: Apache-2.0
"""Every environment variable the plugin reads, with its type and meaning.

Configuration belongs in ``additional_config["afd"]``; these are process knobs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected 0/1/true/false, got {text!r}")


@dataclass(frozen=True)
class EnvVar:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str

    def get(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ValueError(f"environment variable {self.name}: {exc}") from None


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"expected a number > 0, got {text!r}")
    return value


def _steps(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"expected a step count >= 0, got {text!r}")
    return value


ENV_VARS: dict[str, EnvVar] = {
    v.name: v
    for v in (
        EnvVar(
            "AFD_PLUGIN_DISABLE",
            _flag,
            False,
            "Make register() a no-op in this process (escape hatch for debugging).",
        ),
        EnvVar(
            "AFD_SWITCH_INTERVAL_US",
            _positive_float,
            None,
            "Python's thread switch interval in an AFD role process, in "
            "microseconds (sys.setswitchinterval; Python's default is 5000). A "
            "thread woken from an exchange waits up to this long for the GIL.",
        ),
        EnvVar(
            "AFD_METRICS",
            _flag,
            True,
            "AFD's counters on vLLM's `/metrics` (the `afd:*` metrics); 0: off, "
            "and the step parts go untimed.",
        ),
        EnvVar(
            "AFD_METRICS_DIR",
            str,
            None,
            "Where a server's engine and workers leave AFD's counters for its "
            "API server's `/metrics`. Set by the server's first process (a "
            "directory in the temp dir, removed when it exits); its engine and "
            "workers inherit it, and replace a name from outside the server.",
        ),
        EnvVar(
            "AFD_STEP_TIMING",
            _steps,
            0,
            "Every this many steps, each AFD role logs where its step time went "
            "(an `AFD_STEP_TIMING` line, parts in ms per step); 0: off.",
        ),
    )
}


def get(name: str) -> Any:
    return ENV_VARS[name].get()
