# SPDX-License-Identifier: Apache-2.0
"""Engines that run a launch plan's servers: ``local`` (subprocesses of the
harness, optionally one network namespace per node) and ``ray`` (one actor per
server on its node of a Ray cluster). The harness keeps the verdict; an engine
places, starts, watches and stops."""

from __future__ import annotations

ENGINES = ("local", "ray")
"""Names accepted by ``--engine``."""
