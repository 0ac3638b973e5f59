# SPDX-License-Identifier: Apache-2.0
"""The one readiness loop both engines wait in (``readiness.poll_until_ready``).

Probes here are plain callables over a counter: the loop's contract is what
is under test, not HTTP (tests/harness/test_readiness.py covers the probes).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from afd_e2e.processes.readiness import ProbeResult, poll_until_ready


class NotReady(Exception):
    pass


def ready_after(calls: int) -> tuple[list[int], object]:
    count = [0]

    def probe() -> ProbeResult:
        count[0] += 1
        return ProbeResult(count[0] >= calls, f"attempt {count[0]}")

    return count, probe


def not_ready(
    pending: Mapping[str, object], seen: Mapping[str, str], waited: float
) -> Exception:
    return NotReady(f"{sorted(pending)} {dict(seen)} after {waited:.1f} s")


def test_each_role_is_marked_ready_once_and_a_missing_probe_is_ready_at_once():
    counts, probe = ready_after(3)
    marked: list[str] = []
    poll_until_ready(
        {"attention:0": probe, "ffn:0": None},  # type: ignore[dict-item]
        timeout_s=5.0,
        poll_s=0.0,
        check_alive=lambda: None,
        on_ready=marked.append,
        not_ready=not_ready,
    )
    assert marked == ["ffn:0", "attention:0"]
    assert counts == [3]


def test_a_role_dying_right_after_the_last_probe_passed_is_not_reported_ready():
    _, probe = ready_after(1)
    rounds = [0]

    def check_alive() -> None:
        rounds[0] += 1
        if rounds[0] == 2:  # the check after every role turned ready
            raise RuntimeError("ffn:0 exited with code 1")

    with pytest.raises(RuntimeError, match="ffn:0 exited"):
        poll_until_ready(
            {"ffn:0": probe},  # type: ignore[dict-item]
            timeout_s=5.0,
            poll_s=0.0,
            check_alive=check_alive,
            on_ready=lambda name: None,
            not_ready=not_ready,
        )


def test_past_the_deadline_the_pending_roles_and_their_last_probe_are_named():
    _, never = ready_after(10**9)
    progress: list[tuple[list[str], float]] = []
    with pytest.raises(NotReady) as raised:
        poll_until_ready(
            {"attention:0": never, "ffn:0": None},  # type: ignore[dict-item]
            timeout_s=0.3,
            poll_s=0.01,
            check_alive=lambda: None,
            on_ready=lambda name: None,
            not_ready=not_ready,
            progress=lambda pending, seen, waited: progress.append(
                (sorted(pending), waited)
            ),
            progress_every_s=0.1,
        )
    message = str(raised.value)
    assert message.startswith("['attention:0'] {")
    assert "'ffn:0': 'alive (no probe)'" in message
    assert progress and all(names == ["attention:0"] for names, _ in progress)
    assert [w for _, w in progress] == sorted(w for _, w in progress)
