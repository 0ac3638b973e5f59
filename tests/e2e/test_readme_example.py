# SPDX-License-Identifier: Apache-2.0
"""The README's copy-paste example runs as written: its bash block (two
servers started with ``--additional-config`` and a curl to the attention
API) answers a completion, and every process it started ends on SIGTERM.

Only the three port numbers are replaced by free ones (the block's fixed
ports may be taken on a shared machine); every other character is the
README's, and the getting-started page must hold the same server commands.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from afd_e2e.launch.ports import pick_free_port

ROOT = Path(__file__).resolve().parents[2]
PORTS = ("18000", "18001", "29650")
"""The ports the README's example names: attention API, FFN API, rendezvous."""


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Try it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's 'Try it' section lost its bash block"
    return block.group(1)


def server_lines(block: str) -> list[str]:
    """The lines that start or configure the servers (not the curl)."""
    lines = block.replace("\\\n", " ").splitlines()
    return [line for line in lines if "vllm_cli serve" in line or "AFD=" in line]


def test_the_getting_started_page_starts_the_same_servers() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    block = readme_example()
    for line in server_lines(block) + [
        line for line in block.splitlines() if line.startswith("ARGS=")
    ]:
        assert line.rstrip(" &") in page.replace("\\\n", " "), line


def test_the_readme_example_serves_a_completion_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    script = readme_example()
    for port in PORTS:
        assert port in script, f"the example no longer names port {port}"
        script = script.replace(port, str(pick_free_port("127.0.0.1")))
    bindir = str(Path(sys.executable).parent)  # afd-e2e, python of this env
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"]}
    # The backgrounded servers keep the shell's stdout open, so the shell's
    # end is awaited, not the end of its output: everything goes to one file.
    log = tmp_path / "example.log"
    with log.open("wb") as out:
        shell = subprocess.Popen(
            ["bash", "-c", script],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            start_new_session=True,  # the servers it backgrounds stay in its group
        )
    group = shell.pid
    members: set[psutil.Process] = set()
    try:
        code = shell.wait(timeout=420)
        members = {
            p for p in psutil.process_iter() if _pgid(p.pid) == group and p.pid != group
        }
        output = log.read_text(errors="replace")
        assert code == 0, f"the example exited {code}; its output: {log}"
        completion = _completion(output)
        assert completion["usage"]["completion_tokens"] == 16, completion
        assert completion["choices"][0]["text"], completion
        assert len(members) >= 2, "the example's two servers were not found"
    finally:
        _stop_group(group)
    stopped_by_term = all(not p.is_running() for p in members)
    assert stopped_by_term, f"left behind: {[p.pid for p in members if p.is_running()]}"


def _completion(output: str) -> dict:
    """curl's answer: the one completion object among the servers' logs."""
    start = output.find('{"id":"cmpl-')
    assert start >= 0, "no completion in the example's output"
    found, _ = json.JSONDecoder().raw_decode(output, start)
    return found


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _stop_group(group: int, grace_s: float = 30.0) -> None:
    """SIGTERM to the example's process group; SIGKILL fails the test."""
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(_pgid(p.pid) == group for p in psutil.process_iter()):
            return
        time.sleep(0.2)
    os.killpg(group, signal.SIGKILL)
    raise AssertionError(f"the example's processes needed SIGKILL after {grace_s} s")
