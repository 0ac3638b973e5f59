# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e cluster up|down``: a local Ray cluster of a head plus one worker
node per logical node name, for tests and demos of ``--engine ray``.

Each node is one ``ray start --block`` process in its own session, carrying a
cluster marker that every Ray process it starts inherits. ``down`` signals the
workers' ``ray start`` first, then the head's (a SIGTERM to the whole session
waits for the head's drain for over 30 s), and then proves with the marker
that no Ray process is left, SIGKILLing and naming any that is.

Workers offer the custom resource ``afd-node-<name>`` by which the ray engine
places a server on its logical node; on a real cluster, start each worker
with ``ray start --resources '{"afd-node-<name>": 1}'`` the same way."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from afd_e2e.define import policy
from afd_e2e.launch.plan import HOST, free_port
from afd_e2e.launch.ports import RANGE_BLOCK
from afd_e2e.processes.proc_scan import scan_marked, wait_exit

NODE_RESOURCE_PREFIX = "afd-node-"
DEFAULT_STATE_DIR = Path("runs") / "ray-cluster"
STATE_FILE = "cluster.json"


def node_resource(node: str) -> str:
    """The custom resource a worker offers for logical node ``node``."""
    return NODE_RESOURCE_PREFIX + node


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message says why."""


@dataclass
class ClusterState:
    """What ``up`` started, as ``down`` (and ``--engine ray``) read it back."""

    address: str
    marker: str
    """``AFD_E2E_RUN_ID`` of every process of the cluster."""
    temp_dir: str
    head_pid: int
    workers: dict[str, int] = field(default_factory=dict)
    """Logical node -> pid of its ``ray start --block``."""
    log_dir: str = ""

    def save(self, state_dir: Path) -> Path:
        state_dir.mkdir(parents=True, exist_ok=True)
        path = state_dir / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, state_dir: Path) -> ClusterState | None:
        path = state_dir / STATE_FILE
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))


def _ray_command() -> list[str]:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.is_file() else shutil.which("ray")
    if found is None:
        raise ClusterError(
            "the 'ray' command is not installed here; install the ray extra "
            "(pip install -e '.[ray]') or use tox -e ray"
        )
    return [found]


def _spawn(argv: list[str], log: Path, marker: str, node: str) -> subprocess.Popen:
    env = {
        **os.environ,
        policy.RUN_ID_ENV: marker,
        policy.PROCESS_ROLE_ENV: f"ray:{node}",
        "RAY_USAGE_STATS_ENABLED": "0",
        # A raylet gives its agents 30 s to start; a busy 2-core machine
        # needs longer (the raylet aborts otherwise).
        "RAY_agent_register_timeout_ms": "180000",
    }
    env.pop("RAY_ADDRESS", None)
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def up(
    nodes: list[str],
    state_dir: Path = DEFAULT_STATE_DIR,
    *,
    cpus_per_node: int = 2,
    timeout_s: float = 120.0,
) -> ClusterState:
    """Start a head and one worker per name; returns once all are alive."""
    if len(nodes) > MAX_WORKER_NODES:
        raise ClusterError(
            f"{len(nodes)} nodes asked for; a local cluster has at most "
            f"{MAX_WORKER_NODES} worker nodes (their worker ports share "
            f"{RANGE_BLOCK[0]}-{RANGE_BLOCK[1]}); nothing was started"
        )
    if ClusterState.load(state_dir) is not None:
        raise ClusterError(
            f"{state_dir / STATE_FILE} exists: a cluster is already up; run "
            "`afd-e2e cluster down` first"
        )
    ray = _ray_command()
    tag = secrets.token_hex(3)
    marker = f"ray-cluster-{tag}"
    temp_dir = f"/tmp/afd-ray-{tag}"  # Ray's socket paths must stay short
    state_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    common = ["--block", "--node-ip-address", HOST, "--disable-usage-stats"]
    head = _spawn(
        [
            *ray,
            "start",
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            "0",
            "--include-dashboard",
            "false",
            "--temp-dir",
            temp_dir,
            *_node_ports(None),
            *common,
        ],
        state_dir / "head.log",
        marker,
        "head",
    )
    state = ClusterState(f"{HOST}:{port}", marker, temp_dir, head.pid)
    state.log_dir = str(state_dir.resolve())
    state.save(state_dir)  # from here on, `down` can stop what started
    deadline = time.monotonic() + timeout_s
    _wait_alive(state, [], deadline)
    # One node at a time: started together, their daemons starve each other.
    for index, node in enumerate(nodes):
        worker = _spawn(
            [
                *ray,
                "start",
                "--address",
                state.address,
                "--num-cpus",
                str(cpus_per_node),
                "--resources",
                json.dumps({node_resource(node): 1}),
                *_node_ports(index),
                *common,
            ],
            state_dir / f"worker-{node}.log",
            marker,
            node,
        )
        state.workers[node] = worker.pid
        state.save(state_dir)
        _wait_alive(state, nodes[: index + 1], deadline)
    return state


# Ray's per-node daemons default to fixed ports (the dashboard agent's 52365,
# among others): several nodes on one machine each need their own.
_PER_NODE_PORTS = (
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)
WORKER_PORTS_PER_NODE = 200
MAX_WORKER_NODES = (RANGE_BLOCK[1] - RANGE_BLOCK[0] + 1) // WORKER_PORTS_PER_NODE - 1
"""Worker nodes whose port ranges fit beside the head's in ``RANGE_BLOCK``."""


def _node_ports(index: int | None) -> list[str]:
    """Free ports for one node's daemons, and a worker port range of its own
    (``index`` None: the head's, below the workers'; ``up`` keeps ``index``
    below :data:`MAX_WORKER_NODES`)."""
    out = []
    for flag in _PER_NODE_PORTS:
        out += [flag, str(free_port())]
    low = RANGE_BLOCK[0] + WORKER_PORTS_PER_NODE * (0 if index is None else index + 1)
    out += ["--min-worker-port", str(low)]
    out += ["--max-worker-port", str(low + WORKER_PORTS_PER_NODE - 1)]
    return out


def _wait_alive(state: ClusterState, nodes: list[str], deadline: float) -> None:
    """Until the head answers and offers every node of ``nodes``."""
    import ray  # the ray extra

    wanted = {node_resource(n) for n in nodes}
    seen: set[str] | None = None
    while time.monotonic() < deadline:
        for pid in [state.head_pid, *state.workers.values()]:
            if not _alive(pid):
                raise ClusterError(
                    f"a Ray node process (pid {pid}) exited during start-up; "
                    f"see the logs in {state.log_dir}"
                )
        try:
            if not ray.is_initialized():
                ray.init(
                    address=state.address, log_to_driver=False, logging_level="ERROR"
                )
            seen = {
                key
                for node in ray.nodes()
                if node.get("Alive")
                for key in node.get("Resources", {})
                if key in wanted
            }
        except Exception:  # the head is not up yet
            seen = None
        if seen == wanted:
            ray.shutdown()
            return
        time.sleep(1.0)
    if ray.is_initialized():
        ray.shutdown()
    missing = "the head" if seen is None else ", ".join(sorted(wanted - seen))
    raise ClusterError(
        f"the Ray cluster was not up in time (missing {missing}); "
        f"see the logs in {state.log_dir}"
    )


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (another afd-e2e started it)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return not _zombie(pid)
    return done == 0


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


@dataclass
class DownReport:
    """What ``down`` did; it failed when anything needed SIGKILL."""

    signalled: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    """Processes of the cluster alive after the grace: each fails ``down``."""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.killed


def down(state_dir: Path = DEFAULT_STATE_DIR, *, grace_s: float = 30.0) -> DownReport:
    """Stop the cluster of ``state_dir``: workers, then the head, then prove
    (by its marker) that nothing of it is left."""
    state = ClusterState.load(state_dir)
    if state is None:
        raise ClusterError(f"no cluster state at {state_dir / STATE_FILE}")
    began = time.monotonic()
    report = DownReport()
    deadline = began + grace_s
    for name, pid in [*state.workers.items(), ("head", state.head_pid)]:
        try:
            os.kill(pid, signal.SIGTERM)
            report.signalled.append(f"{name} (pid {pid})")
        except ProcessLookupError:
            continue
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    # Everything that still carries the cluster's marker: Ray's daemons and
    # workers. They get the rest of the grace after a SIGTERM, then SIGKILL.
    left = scan_marked(state.marker, {})
    for target in left:
        target.send(signal.SIGTERM)
    wait_exit(left, max(deadline, time.monotonic() + 5.0))
    for target in left:
        if target.alive():
            report.killed.append(target.record().describe())
            target.send(signal.SIGKILL)
        target.close()
    (state_dir / STATE_FILE).unlink()
    shutil.rmtree(state.temp_dir, ignore_errors=True)
    report.duration_s = time.monotonic() - began
    return report


def leftovers(marker: str) -> list[str]:
    """Live processes carrying ``marker`` (what a clean ``down`` leaves: none)."""
    found = scan_marked(marker, {})
    out = [t.record().describe() for t in found]
    for target in found:
        target.close()
    return out
