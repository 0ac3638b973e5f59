# SPDX-License-Identifier: Apache-2.0
"""A miniature ``afd-e2e run`` for the interrupt tests: start, wait, "check", stop.

Prints READY once its fake roles serve, then waits for a signal; exits with the
outcome's exit code and writes results.json into the run directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from afd_e2e.processes.interrupts import Interrupted, InterruptGuard
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.readiness import Probe, ProbeResult, attention_api_probe
from afd_e2e.processes.role_errors import RoleError
from afd_e2e.processes.role_process import ProcessSpec
from afd_e2e.publish.report import CheckResult, RunReport, Timings, write_results_json

SERVER = Path(__file__).with_name("role_server.py")


def port_file_probe(port_file: Path) -> Probe:
    def probe() -> ProbeResult:
        if not port_file.exists():
            return ProbeResult(False, "no port yet")
        base = f"http://127.0.0.1:{port_file.read_text()}"
        return attention_api_probe(base, "fake")()

    return probe


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--grace-s", type=float, default=2.0)
    parser.add_argument("--ffn-ignores-sigterm", action="store_true")
    args = parser.parse_args()
    ports = {role: args.run_dir / f"{role}.port" for role in ("ffn", "attention")}
    ffn_flags = ["--ignore-sigterm"] if args.ffn_ignores_sigterm else []
    specs = [
        ProcessSpec(
            role,
            0,
            [sys.executable, str(SERVER), "--port-file", str(ports[role]), *flags],
        )
        for role, flags in (("ffn", ffn_flags), ("attention", []))
    ]
    probes = {f"{role}:0": port_file_probe(path) for role, path in ports.items()}
    report = RunReport("driver", args.run_id, {}, Timings(started_at=time.time()))
    manager = ProcessManager(
        args.run_id, args.run_dir, scenario_id="driver", grace_s=args.grace_s
    )
    with InterruptGuard() as guard:
        try:
            for spec in specs:
                manager.start(spec)
            manager.wait_ready(probes, 20.0)
            print("READY", flush=True)
            time.sleep(60)  # the "checks": a signal ends them
            report.checks.append(CheckResult("sleep", True))
        except RoleError as exc:
            report.error = str(exc)
        except Interrupted as exc:
            report.interrupted_by = exc.signame
        finally:
            report.commands = manager.commands()
            report.teardown = manager.stop()
            print("TEARDOWN " + ("ok" if report.teardown.ok else "failed"), flush=True)
        if guard.signame and report.interrupted_by is None:
            report.interrupted_by = guard.signame
    write_results_json(report, args.run_dir / "results.json")
    return report.outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
