# SPDX-License-Identifier: Apache-2.0
"""Real vLLM OpenAI servers for tests and benchmarks: a set of them on one
ProcessManager (start, health wait, strict teardown) and no-retry clients."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any

from afd_e2e.checks.completions import (
    StreamOutcome,
    greedy_token_ids,
    post_completion,
    stream_completion,
)
from afd_e2e.checks.metrics import metric_sum, scrape
from afd_e2e.launch.plan import HOST, free_port, server_argv
from afd_e2e.processes.process_manager import ProcessManager
from afd_e2e.processes.readiness import health_probe
from afd_e2e.processes.role_logs import tail_lines
from afd_e2e.processes.role_process import ProcessSpec, RoleProcess
from afd_e2e.processes.teardown_record import TeardownRecord

__all__ = [
    "CPU_ARGS",
    "CPU_ENV",
    "ServerTeardownError",
    "VllmServer",
    "VllmServers",
    "afd_config",
]

CPU_ENV: Mapping[str, str] = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_LOGGING_LEVEL": "INFO",
    "PYTHONUNBUFFERED": "1",
}
"""Environment of a server on the CPU backend (added to the caller's)."""
CPU_ARGS: tuple[str, ...] = (
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    "67108864",
    "--max-model-len",
    "512",
    "--max-num-seqs",
    "32",
)
"""Arguments every CPU server gets before its own."""
GLOO_CONNECTOR = "P2pGlooAFDConnector"
STOP_GRACE_S = 30.0
"""SIGTERM grace of the set's teardown; a server still up after it fails it."""
READY_TIMEOUT_S = 420.0
REQUEST_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 40
ENGINE_PID = re.compile(r"^\(\w+ pid=(\d+)\)", re.MULTILINE)
"""The pid vLLM puts in front of each line of a process of a server."""


def afd_config(
    role: str,
    port: int,
    *,
    connector: str = GLOO_CONNECTOR,
    connector_extra_config: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """``additional_config`` of one AFD role whose rendezvous is on loopback
    ``port``; ``fields`` (``num_attention_ranks``, ...) go into ``afd`` as is."""
    extra = (
        {"rendezvous_timeout_s": 300.0}
        if connector_extra_config is None
        else dict(connector_extra_config)
    )
    return {
        "afd": {
            "role": role,
            "connector": connector,
            "host": HOST,
            "port": port,
            "connector_extra_config": extra,
            **fields,
        }
    }


class ServerTeardownError(RuntimeError):
    """Stopping the servers needed SIGKILL or left processes behind."""


class VllmServer:
    """One ``vllm serve`` (an OpenAI server) of a :class:`VllmServers` set.

    Its process belongs to the set's manager: wait on it, ask it, read its
    log; :meth:`stop` tears it down early (the set's record keeps the result).
    """

    def __init__(
        self, manager: ProcessManager, model: str, port: int, process: RoleProcess
    ) -> None:
        self._manager = manager
        self.model = model
        """The model path, also its served name (the ``model`` of requests)."""
        self.port = port
        self.process = process

    @property
    def name(self) -> str:
        return self.process.spec.role

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def pgid(self) -> int:
        """Its process group (its own session: equal to :attr:`pid`)."""
        return self.process.pid

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.process.spec.argv)

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    @property
    def ready_after_s(self) -> float | None:
        """Seconds from launch to healthy, once :meth:`wait_ready` saw it."""
        return self.process.ready_after_s

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    # -- lifecycle

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> VllmServer:
        """Poll ``GET /health`` until 200. Raises ``ProcessDiedError`` (with
        the log tail) as soon as this or another running server of the set
        exits, ``ReadinessTimeoutError`` past ``timeout_s``."""
        name = self.process.name
        self._manager.wait_ready(
            {name: health_probe(self.base_url)}, timeout_s, names=[name]
        )
        return self

    def exit_code(self) -> int | None:
        """The exit code once exited (negative: killed by that signal)."""
        return self.process.exit_code()

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for it to exit; the exit code, or None."""
        return self.process.wait_exit(timeout_s)

    def pids(self) -> set[int]:
        """Its pid and those its log lines name (``(EngineCore pid=N)``: the
        engine core logs the AFD lines); also once it has exited."""
        named = ENGINE_PID.findall(self.log_text())
        return {self.pid, *map(int, named)}

    def kill(self) -> float:
        """SIGKILL it now, as an injected fault (the set's teardown record
        lists it as such and no longer checks it); when the signal went out
        (``time.monotonic()``)."""
        self._manager.kill_process(self.process.name)
        return self._manager.injected_at[self.process.name]

    def stop(self) -> TeardownRecord:
        """Tear this server down now (SIGTERM, grace, SIGKILL); the others
        keep running. Its record is also part of the set's."""
        return self._manager.stop_process(self.process.name)

    # -- requests

    def complete(
        self,
        prompts: Sequence[str],
        max_tokens: int = 16,
        timeout_s: float = REQUEST_TIMEOUT_S,
        dp_rank: int | None = None,
    ) -> list[list[int]]:
        """Greedy completions of ``prompts`` in one request (never retried);
        the generated token ids in prompt order. ``dp_rank``: served by that
        DP rank of a server with several."""
        try:
            return greedy_token_ids(
                self.base_url, self.model, prompts, max_tokens, timeout_s, dp_rank
            )
        except OSError as exc:  # HTTPError and URLError too; the caller decides
            exc.add_note(f"{self.name}: completion failed\n{self.log_tail(20)}")
            raise

    def complete_each(
        self, prompts: Sequence[str], max_tokens: int = 16
    ) -> list[list[int]]:
        """One request per prompt, in turn: every step's batch is the same in
        any run (a multi-prompt request is batched as its prompts arrive, and
        kernels may round differently for other batch shapes)."""
        return [self.complete([p], max_tokens)[0] for p in prompts]

    def request(
        self, body: Mapping[str, Any], timeout_s: float = REQUEST_TIMEOUT_S
    ) -> dict[str, Any]:
        """The answer to one completions request of any shape (this server's
        model filled in), never retried."""
        try:
            return post_completion(
                self.base_url, {"model": self.model, **body}, timeout_s
            )
        except OSError as exc:
            exc.add_note(f"{self.name}: completion failed\n{self.log_tail(20)}")
            raise

    def stream(
        self,
        body: Mapping[str, Any],
        hang_up_after: int | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> StreamOutcome:
        """One streamed completion; see :func:`stream_completion`."""
        return stream_completion(
            self.base_url, {"model": self.model, **body}, timeout_s, hang_up_after
        )

    def metrics(self) -> str:
        """This server's Prometheus text (vLLM's ``/metrics``)."""
        return scrape(self.base_url, REQUEST_TIMEOUT_S)

    def counter(self, name: str, **labels: str) -> float:
        """Sum of one of vLLM's counters or gauges over the series whose labels
        include ``labels``; one the server does not export is an error."""
        try:
            return metric_sum(self.metrics(), name, **labels)
        except KeyError:
            raise KeyError(f"{name} is not in {self.name}'s /metrics") from None

    # -- log

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        tail = tail_lines(self.log_path, lines)
        header = f"--- last {len(tail)} lines of {self.log_path} ---"
        return "\n".join([header, *tail])


class VllmServers(AbstractContextManager["VllmServers"]):
    """Real vLLM OpenAI servers on 127.0.0.1, started by one ProcessManager
    (one run id): free ports, own sessions, logs ``<log_dir>/<name>-0.log``.

    Leaving the ``with`` block stops them all and raises
    :class:`ServerTeardownError` when one needed SIGKILL or left a process
    with the run's marker behind; :meth:`stop_all` returns those problems.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        env: Mapping[str, str] = CPU_ENV,
        base_args: Sequence[str] = CPU_ARGS,
        run_id: str | None = None,
        grace_s: float = STOP_GRACE_S,
        stream_logs: bool = False,
        progress_every_s: float | None = 10.0,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.env = dict(env)
        self.base_args = tuple(base_args)
        self.manager = ProcessManager(
            run_id or f"vllm-servers-{secrets.token_hex(4)}",
            self.log_dir,
            scenario_id="vllm-servers",
            grace_s=grace_s,
            stream_logs=stream_logs,
            progress_every_s=progress_every_s,
        )
        self.started: list[VllmServer] = []

    def start(
        self,
        name: str,
        model: Path | str,
        additional_config: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
    ) -> VllmServer:
        """Launch one server (returns at once; call ``wait_ready``). ``name``
        is a role name: lower case, digits, ``-`` and ``_``."""
        port = free_port()
        argv = [*server_argv(str(model), port), *self.base_args, *extra_args]
        if additional_config is not None:
            argv += ["--additional-config", json.dumps(additional_config)]
        spec = ProcessSpec(name, 0, argv, {**self.env, **(env or {})}, port=port)
        server = VllmServer(self.manager, str(model), port, self.manager.start(spec))
        self.started.append(server)
        return server

    def afd_pair(
        self,
        model: Path | str,
        args: Sequence[str] = (),
        attention_args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        suffix: str = "",
        **afd: Any,
    ) -> tuple[VllmServer, VllmServer]:
        """An FFN and an attention server (``afd`` goes to :func:`afd_config`),
        named ``ffn<suffix>`` and ``attention<suffix>``, with ``env`` added to
        both; both start loading at once. Returns ``(ffn, attention)``."""
        port = free_port()
        ffn = self.start(
            f"ffn{suffix}", model, afd_config("ffn", port, **afd), args, env=env
        )
        attention = self.start(
            f"attention{suffix}",
            model,
            afd_config("attention", port, **afd),
            [*args, *attention_args],
            env=env,
        )
        return ffn, attention

    @property
    def teardown_record(self) -> TeardownRecord | None:
        return self.manager.teardown_record

    def stop_all(self) -> list[str]:
        """Stop every server (idempotent); one line per problem: a process
        that needed SIGKILL, one left behind, a teardown error."""
        return self.manager.stop().problems()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        problems = self.stop_all()
        if not problems:
            return
        message = "stopping the vLLM servers failed:\n" + "\n".join(problems)
        if exc is None:
            raise ServerTeardownError(message)
        exc.add_note(message)
