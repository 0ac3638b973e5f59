# SPDX-License-Identifier: Apache-2.0
"""What runs inside a Ray actor on a node: one server process, owned there.

The agent starts the server in its own session through a
:class:`~afd_e2e.processes.process_manager.ProcessManager` (its log file,
its run markers), and stops it the same strict way: SIGTERM, grace, SIGKILL,
then a marker scan of the node for anything of the server left. It never
decides the verdict; it returns the teardown record for the harness to judge.

Imported in Ray worker processes; it needs no Ray import itself."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from afd_e2e.processes.proc_scan import scan_marked
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.role_logs import LOG_TAIL_LINES, tail_lines
from afd_e2e.processes.role_process import ProcessSpec
from afd_e2e.processes.teardown_record import ProcessRecord, TeardownRecord

# A Ray worker's environment is Ray's: OMP_NUM_THREADS=1 and the cluster's
# address. A server must see neither (vLLM would run one thread, or join the
# harness's cluster through ray.init()).
_DROPPED_PREFIXES = ("RAY_",)
_DROPPED = frozenset({"OMP_NUM_THREADS"})


def server_base_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The environment a server starts from on this node: the worker's, less
    what Ray put there for its own workers."""
    return {
        key: value
        for key, value in environ.items()
        if key not in _DROPPED and not key.startswith(_DROPPED_PREFIXES)
    }


class ServerAgent:
    """One server of a plan on this node (a Ray actor class body)."""

    def __init__(
        self,
        run_id: str,
        run_dir: str,
        scenario_id: str,
        grace_s: float,
        marker_scan: bool,
    ) -> None:
        self.manager = ProcessManager(
            run_id,
            Path(run_dir),
            scenario_id=scenario_id,
            marker_scan=marker_scan,
            grace_s=grace_s,
            announce=False,
            progress_every_s=None,
            base_env=server_base_env(os.environ),
        )
        self.name = ""

    def start(
        self, role: str, rank: int, argv: list[str], env: dict[str, str]
    ) -> dict[str, Any]:
        """Start the server; returns where it runs."""
        proc = self.manager.start(ProcessSpec(role, rank, argv, env))
        self.name = proc.name
        return {
            "pid": proc.pid,
            "host": socket.gethostname(),
            "log": str(proc.log_path),
        }

    def exit_code(self) -> int | None:
        """None while the server runs."""
        (proc,) = self.manager.processes
        return proc.exit_code()

    def tail(self, count: int = LOG_TAIL_LINES) -> list[str]:
        (proc,) = self.manager.processes
        return tail_lines(proc.log_path, count)

    def kill(self) -> list[ProcessRecord]:
        """SIGKILL the server on this node, as a fault a check injects; its
        teardown record lists what was killed under ``injected``."""
        return self.manager.kill_process(self.name)

    def stop(self) -> TeardownRecord:
        """Tear the server down as the local engine does; never raises."""
        return self.manager.stop_process(self.name)


def scan_node(run_id: str) -> list[ProcessRecord]:
    """Every live process on this node still carrying ``run_id``'s marker."""
    found = scan_marked(run_id, {})
    records = [t.record() for t in found]
    for target in found:
        target.close()
    return records


__all__ = ["ServerAgent", "TeardownRecord", "scan_node", "server_base_env"]
