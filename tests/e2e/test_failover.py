# SPDX-License-Identifier: Apache-2.0
"""A killed FFN server loses no request: ``afd-e2e run`` on the failover
scenarios. 16 greedy streams generate; the active FFN server is SIGKILLed
mid-generation (the check's injected fault); a standby FFN server takes its
place mid-step and every stream finishes with the colocated run's tokens.
With one micro-batch and two, two attention ranks, two successive
failovers, and on the gloo data path across network namespaces; with no
standby left, the streams fail within ``peer_timeout_s`` as without
standbys. Teardown never needs SIGKILL for any other process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_main_job import processes_with_marker, run_scenario
from test_multi_node_local import run as run_on_nodes

from afd_e2e.engines.netns import NodeNetwork

pytestmark = pytest.mark.e2e

FAILOVER_LINE = re.compile(
    r"afd-plugin: failover: FFN rank 0 \(pid (\d+)\) -> standby \d+ \(pid (\d+)\) "
    r"in ([0-9.]+) s .*stages resume at layers \[([0-9, ]+)\]"
)


def failover_lines(run_dir: Path) -> list[tuple[int, int, float, str]]:
    found = []
    for log in sorted(run_dir.glob("attention-*.log")):
        for m in FAILOVER_LINE.finditer(log.read_text(errors="replace")):
            found.append((int(m[1]), int(m[2]), float(m[3]), m[4]))
    return found


def check_run(results: dict, run_dir: Path, kills: int, attention: int = 1) -> dict:
    """What every failover run shows; the ffn_failover check's figures."""
    checks = {c["name"]: c for c in results["checks"]}
    assert results["outcome"] == "passed", json.dumps(results["checks"], indent=1)
    assert checks["parity"]["figures"]["mismatched_prompts"] == 0
    failover = checks["ffn_failover"]
    figures = failover["figures"]
    assert figures["concurrency"] == 16
    assert len(figures["killed"]) == kills
    # The kills were the check's injected faults; nothing else needed SIGKILL.
    teardown = results["teardown"]
    assert teardown["escalated"] == [] and teardown["leaks"] == []
    injected = {p["name"] for p in teardown["injected"]}
    assert injected == {k.replace("-", ":") for k in figures["killed"]}
    assert processes_with_marker(results["run_id"]) == []
    # One log line per failover and attention rank: the dead pid, the
    # standby's, the time it took.
    lines = failover_lines(run_dir)
    assert len(lines) == len(figures["promoted"]) * attention, lines
    assert len({(dead, standby) for dead, standby, _, _ in lines}) == len(
        figures["promoted"]
    )
    assert all(seconds < 5 for _, _, seconds, _ in lines), lines
    return figures


@pytest.mark.parametrize(
    ("scenario", "kills", "attention"),
    [
        ("cpu-eager-1a1f-failover", 1, 1),
        ("cpu-dbo-1a1f-failover", 1, 1),
        ("cpu-eager-2a1f-failover", 1, 2),
        ("cpu-eager-1a1f-failover-twice", 2, 1),
    ],
)
def test_a_killed_ffn_server_loses_no_request(
    scenario: str, kills: int, attention: int, tmp_path: Path, tiny_model_root: Path
) -> None:
    run_dir = tmp_path / "run"
    results = run_scenario(scenario, run_dir, tiny_model_root)
    results.pop("_stderr")
    figures = check_run(results, run_dir, kills, attention)
    assert figures["completed"] == 16 and figures["failed"] == 0
    assert figures["mismatched_streams"] == 0
    assert len(figures["promoted"]) == kills
    if scenario == "cpu-dbo-1a1f-failover":
        checks = {c["name"]: c for c in results["checks"]}
        assert checks["dual_ubatch_evidence"]["passed"]
        assert checks["gsm8k_answers"]["figures"]["differing"] == 0


def test_with_no_standby_left_the_streams_fail_within_peer_timeout(
    tmp_path: Path, tiny_model_root: Path
) -> None:
    run_dir = tmp_path / "run"
    results = run_scenario(
        "cpu-eager-1a1f-failover-exhausted", run_dir, tiny_model_root
    )
    results.pop("_stderr")
    figures = check_run(results, run_dir, kills=2)
    assert figures["promoted"] == ["standby-0"]
    assert figures["completed"] == 0 and figures["failed"] == 16
    assert figures["time_to_failure_s"] <= figures["peer_timeout_s"]
    log = (run_dir / "attention-0.log").read_text(errors="replace")
    assert "No standby took its place: no standby FFN server is waiting" in log


def test_the_gloo_path_fails_over_across_network_namespaces(
    tmp_path: Path, tiny_model_root: Path
) -> None:
    network = "loopback" if NodeNetwork.unavailable() is not None else "netns"
    run_dir = tmp_path / "run"
    done = run_on_nodes("cpu-2node-1a1f-failover", network, run_dir, tiny_model_root)
    results = json.loads((run_dir / "results.json").read_text())
    assert done.returncode == 0, json.dumps(results["checks"]) + done.stderr[-3000:]
    figures = check_run(results, run_dir, kills=1)
    assert figures["completed"] == 16 and figures["mismatched_streams"] == 0
    if network == "netns":
        commands = results["commands"]
        attention = commands["attention:0"]["argv"]
        standby = commands["standby:0"]["argv"]
        assert attention[3].endswith("-node-a") and standby[3].endswith("-node-b")
        # The rendezvous moved to attention rank 0's node; the standby
        # reached its attention rank over gloo, never shared memory.
        config = json.loads(attention[attention.index("--additional-config") + 1])
        assert config["afd"]["host"] == attention[attention.index("--host") + 1]
        log = (run_dir / "standby-0.log").read_text(errors="replace")
        assert "(FFN rank 0): gloo data path (these peers run on another" in log
