# SPDX-License-Identifier: Apache-2.0
"""What ``afd-e2e bench --profile`` measures: the concurrencies (batch
sizes), the prompts, the step-timing window and how many windows per batch."""

from __future__ import annotations

from dataclasses import dataclass

from afd_e2e.bench.options import bound_errors, concurrency_errors

SETTLE_LINES = 2
"""Attention timing lines skipped once every stream decodes: the first may
cover prefill steps, and the FFN role's lines lag the attention role's by up
to one window."""


@dataclass(frozen=True)
class ProfileOptions:
    """What ``--profile`` measures."""

    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    """Streams held open in each window: the batch sizes to measure."""
    input_len: int = 128
    """Prompt tokens of every stream."""
    timing_window: int = 16
    """Steps per ``AFD_STEP_TIMING`` line (the roles' averaging window)."""
    windows: int = 4
    """Attention timing lines measured per concurrency."""
    seed: int = 0
    """Seed of the prompts' token ids."""
    timeout_s: float = 600.0
    """One concurrency's window fails after this long."""

    @property
    def max_tokens(self) -> int:
        """Long enough that no stream ends before its window does: the lines
        awaited, one more for the line in progress, and a margin."""
        return (SETTLE_LINES + self.windows + 2) * self.timing_window + 32

    def errors(self) -> list[str]:
        """Every problem, each naming its flag."""
        out = concurrency_errors(self.concurrency)
        if len(set(self.concurrency)) < 2:
            out.append(
                "--concurrency: --profile needs two or more different values "
                "(a line is fitted to the batch sizes)"
            )
        return out + bound_errors(
            (
                ("--input-len", self.input_len),
                ("--timing-window", self.timing_window),
                ("--profile-windows", self.windows),
            ),
            seed=self.seed,
            timeout_s=self.timeout_s,
        )
