# SPDX-License-Identifier: Apache-2.0
"""The harness's terminal lines: the status line in place on a terminal, a
line now and then elsewhere, and other lines said around it."""

from __future__ import annotations

import io
import os
import sys

import pytest

from afd_e2e.processes.terminal import (
    ReadinessLine,
    StatusLine,
    ready_line,
    say,
    started_line,
    waiting_line,
)

TERMINAL = "afd_e2e.processes.terminal"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def on_screen(monkeypatch: pytest.MonkeyPatch) -> Terminal:
    """stderr is a terminal now (set in the test itself: pytest's capture
    sets sys.stderr again between a fixture's setup and the test)."""
    out = Terminal()
    monkeypatch.setattr(sys, "stderr", out)
    return out


def test_on_a_terminal_the_line_is_rewritten_in_place(monkeypatch):
    screen = on_screen(monkeypatch)
    status = StatusLine()
    assert status.in_place
    status.update("waiting long text")
    status.update("waiting")
    # the shorter text blanks what is left of the longer one
    assert screen.getvalue() == "".join(
        ["\rwaiting long text", "\rwaiting          ", "\rwaiting"]
    )
    status.close("all ready")
    assert screen.getvalue().endswith("\r" + " " * 7 + "\rall ready\n")


def test_a_line_said_meanwhile_goes_above_the_status_line(monkeypatch):
    screen = on_screen(monkeypatch)
    status = StatusLine()
    status.update("waiting 1 s")
    say("afd-e2e: SIGINT received")
    erase = "\r" + " " * 11 + "\r"
    assert screen.getvalue() == "".join(
        ["\rwaiting 1 s", erase, "afd-e2e: SIGINT received\n", "\rwaiting 1 s"]
    )
    status.close()
    say("after")
    assert screen.getvalue().endswith("\r           \rafter\n")  # no redraw


def test_the_line_is_cut_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch):
    screen = on_screen(monkeypatch)
    size = os.terminal_size((40, 20))
    monkeypatch.setattr(f"{TERMINAL}.shutil.get_terminal_size", lambda: size)
    status = StatusLine()
    status.update("x" * 100)
    drawn = screen.getvalue()[1:]
    assert len(drawn) == 39 and drawn.endswith("...")


def test_off_a_terminal_it_is_a_line_per_interval(monkeypatch: pytest.MonkeyPatch):
    clock = iter([0.0, 5.0, 10.0, 10.0, 12.0, 21.0, 21.0])
    monkeypatch.setattr(f"{TERMINAL}.time.monotonic", lambda: next(clock))
    out = io.StringIO()
    status = StatusLine(every_s=10.0, stream=out)
    assert not status.in_place
    for text in ("at 5", "at 10", "at 12", "at 21"):
        status.update(text)
    status.close("done")
    assert out.getvalue() == "at 10\nat 21\ndone\n"


def test_the_start_and_wait_lines():
    assert (
        started_line("ffn:0", 42, 8001, "runs/x/ffn-0.log")
        == "afd-e2e: started ffn:0 (pid 42) on port 8001, log runs/x/ffn-0.log"
    )
    assert (
        started_line("attention:1", 43, None, "l", node="node-b")
        == "afd-e2e: started attention:1 on node-b (pid 43), log l"
    )
    ages = {"baseline:0": 12.6, "ffn:0": 12.4, "attention:0": 12.0}
    assert waiting_line(ages, {"ffn:0"}) == (
        "afd-e2e: waiting for 3 servers (13 s): baseline:0 starting, ffn:0 ready, "
        "attention:0 starting"
    )
    assert ready_line({"ffn:0": 30.2}, 30.6) == (
        "afd-e2e: 1 server ready after 31 s (ffn:0 30 s)"
    )


def test_a_readiness_line_is_taken_off_when_the_wait_fails(monkeypatch):
    """A wait that raises leaves no half-drawn line and no 'ready' line; one
    that ends leaves exactly the all-ready line."""
    screen = on_screen(monkeypatch)
    with pytest.raises(TimeoutError), ReadinessLine({"ffn:0": 0.0}, 10.0) as line:
        line.progress({"ffn:0": None})
        raise TimeoutError
    assert screen.getvalue().endswith("\r")  # erased, nothing after it
    assert "ready after" not in screen.getvalue()
    with ReadinessLine({"ffn:0": 0.0}, 10.0) as line:
        line.progress({})
        line.close({"ffn:0": 3.0})
    assert screen.getvalue().endswith("ready after 0 s (ffn:0 3 s)\n")
    with ReadinessLine({"ffn:0": 0.0}, None) as quiet:  # no line at all
        before = screen.getvalue()
        quiet.progress({"ffn:0": None})
        quiet.close({"ffn:0": 3.0})
    assert screen.getvalue() == before
