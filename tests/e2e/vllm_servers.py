"""Real vLLM OpenAI servers for the CPU end-to-end tests and the benchmark.

A server is a context manager: free port, own session, log file, health
polling that notices the child dying, teardown of its whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from afd_e2e.launch import free_port

CPU_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_LOGGING_LEVEL": "INFO",
    "PYTHONUNBUFFERED": "1",
}
BASE_ARGS = (
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    "67108864",
    "--max-model-len",
    "512",
    "--max-num-seqs",
    "32",
)
STOP_GRACE_S = 30.0

PROMPTS = (
    "Janet has 5 apples and buys 3 more.",
    "What is 12 plus 7?",
    "Tom has 20 coins.",
    "Question: what is 9 times four?",
    "The answer is",
    "Maria buys 14 pencils and",
    "How many books does Chen have now?",
    "58 minus 17 equals",
)


def afd_config(role: str, port: int, **extra: Any) -> dict[str, Any]:
    """``additional_config`` of one role of a 1A1F gloo deployment."""
    timeouts = extra.pop("timeouts", {"rendezvous_timeout_s": 300.0})
    return {
        "afd": {
            "role": role,
            "connector": "P2pGlooAFDConnector",
            "host": "127.0.0.1",
            "port": port,
            "connector_extra_config": timeouts,
            **extra,
        }
    }


class ServerError(RuntimeError):
    """A server died or never became healthy; the message has its log tail."""


class VllmServer:
    """One ``python -m vllm.entrypoints.openai.api_server`` in its own session."""

    def __init__(
        self,
        name: str,
        model: Path,
        log_dir: Path,
        additional_config: dict[str, Any] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.model = str(model)
        self.port = free_port()
        self.log_path = log_dir / f"{name}.log"
        self.argv = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *BASE_ARGS,
            *extra_args,
        ]
        if additional_config is not None:
            self.argv += ["--additional-config", json.dumps(additional_config)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_after_s: float | None = None

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> VllmServer:
        env = {**os.environ, **CPU_ENV}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        return self

    def wait_ready(self, timeout_s: float = 420.0) -> VllmServer:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                raise ServerError(
                    f"{self.name} exited with {self.exit_code()} before it was "
                    f"ready\n{self.log_tail()}"
                )
            if self._healthy():
                self.ready_after_s = time.monotonic() - self.started_at
                return self
            time.sleep(0.5)
        raise ServerError(
            f"{self.name} not ready after {timeout_s}s\n{self.log_tail()}"
        )

    def wait_exit(self, timeout_s: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url("/health"), timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> bool:
        """SIGTERM the server (it stops its engine), then the rest of its
        session, SIGKILL survivors. True when no SIGKILL was needed."""
        if self.proc is None:
            return True
        pgid = self.proc.pid
        graceful = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            deadline = time.monotonic() + STOP_GRACE_S / 2
            while _group_alive(pgid) and time.monotonic() < deadline:
                self.proc.poll()
                time.sleep(0.2)
            if not _group_alive(pgid):
                break
            graceful = graceful and sig != signal.SIGKILL
            _signal_group(pgid, sig)
        self.proc.wait(10)
        return graceful

    def leaked(self) -> bool:
        """Whether any process of this server's session is still alive."""
        return self.proc is not None and _group_alive(self.proc.pid)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- requests -----------------------------------------------------------

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def complete(
        self, prompts: Sequence[str], max_tokens: int = 16, timeout_s: float = 120
    ) -> list[list[int]]:
        """Greedy completions of ``prompts``; token ids in prompt order."""
        body = {
            "model": self.model,
            "prompt": list(prompts),
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        request = urllib.request.Request(
            self.url("/v1/completions"),
            json.dumps(body).encode(),
            {"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            out = json.load(response)
        choices = sorted(out["choices"], key=lambda c: c["index"])
        return [c["token_ids"] for c in choices]

    def complete_each(
        self, prompts: Sequence[str], max_tokens: int = 16
    ) -> list[list[int]]:
        """One request per prompt, in turn: every step's batch is the same in
        any run (a multi-prompt request is batched as its prompts arrive, and
        kernels may round differently for other batch shapes)."""
        return [self.complete([p], max_tokens)[0] for p in prompts]

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


class Servers:
    """The servers one test starts; all are stopped and checked at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[VllmServer] = []

    def start(self, server: VllmServer) -> VllmServer:
        self.started.append(server)
        return server.start()

    def afd_pair(
        self,
        model: Path,
        args: Sequence[str] = (),
        attention_args: Sequence[str] = (),
        **afd: Any,
    ) -> tuple[VllmServer, VllmServer]:
        """An FFN and an attention server; both start loading at once."""
        port = free_port()
        ffn = self.start(
            VllmServer("ffn", model, self.log_dir, afd_config("ffn", port, **afd), args)
        )
        attention = self.start(
            VllmServer(
                "attention",
                model,
                self.log_dir,
                afd_config("attention", port, **afd),
                [*args, *attention_args],
            )
        )
        return ffn, attention

    def stop_all(self) -> list[str]:
        problems = []
        for server in reversed(self.started):
            if not server.stop():
                problems.append(f"{server.name} needed SIGKILL")
            if server.leaked():
                problems.append(f"{server.name} left processes behind")
        return problems
