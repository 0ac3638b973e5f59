# SPDX-License-Identifier: Apache-2.0
"""Two processes share memory only inside one network namespace: the machine
identity the shared-memory path compares must tell namespaces apart (a
placement's nodes as network namespaces, or two containers on one kernel)."""

from __future__ import annotations

import subprocess
import sys

from afd_plugin.connectors.gloo_world import machine_id

PRINT_ID = (
    "from afd_plugin.connectors.gloo_world import machine_id; print(machine_id())"
)


def test_same_namespace_same_machine() -> None:
    other = subprocess.run(
        [sys.executable, "-c", PRINT_ID], capture_output=True, text=True, check=True
    )
    assert other.stdout.strip() == machine_id()


def test_another_network_namespace_is_another_machine() -> None:
    # unshare(1) runs the child in a fresh network namespace (needs root, as
    # the harness's per-node namespaces do).
    other = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", PRINT_ID],
        capture_output=True,
        text=True,
    )
    assert other.returncode == 0, other.stderr
    theirs, ours = other.stdout.strip(), machine_id()
    assert theirs != ours
    # same host and boot: only the namespace differs
    assert theirs.rsplit("/", 1)[0] == ours.rsplit("/", 1)[0]
