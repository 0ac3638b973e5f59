# SPDX-License-Identifier: Apache-2.0
"""Readiness probes against an in-process HTTP server: one call, one attempt.

No child process is started here; the server is a thread of the test process.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from afd_e2e.processes.readiness import (
    PROBE_PROMPT,
    attention_api_probe,
    health_probe,
    probe_completion,
    tcp_probe,
)


@dataclass
class Behaviour:
    health: int = 200
    completion: int = 200
    body: bytes = b'{"choices": [{"text": " world"}]}'
    delay_s: float = 0.0
    seen: list[tuple[str, str, dict[str, object] | None]] = field(default_factory=list)


class FakeApi(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, behaviour: Behaviour) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.behaviour = behaviour

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that timed out and left is what a test wanted

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def _reply(self, status: int, body: bytes = b"{}") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.server.behaviour.seen.append(("GET", self.path, None))
        self._reply(self.server.behaviour.health)

    def do_POST(self) -> None:  # noqa: N802
        behaviour = self.server.behaviour
        length = int(self.headers["Content-Length"])
        behaviour.seen.append(("POST", self.path, json.loads(self.rfile.read(length))))
        time.sleep(behaviour.delay_s)
        if behaviour.completion == 200:
            self._reply(200, behaviour.body)
        else:
            self._reply(behaviour.completion)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi(Behaviour())
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: connections are refused while held."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_ready_after_health_and_one_greedy_token(api: FakeApi):
    result = attention_api_probe(api.url, "tiny-moe")()
    assert result.ready, result.detail
    assert api.behaviour.seen == [
        ("GET", "/health", None),
        (
            "POST",
            "/v1/completions",
            {
                "model": "tiny-moe",
                "prompt": PROBE_PROMPT,
                "max_tokens": 1,
                "temperature": 0,
            },
        ),
    ]


def test_unhealthy_server_is_not_asked_for_a_completion(api: FakeApi):
    api.behaviour.health = 503
    result = attention_api_probe(api.url, "m")()
    assert not result.ready
    assert result.detail == "GET /health: HTTP 503"
    assert [method for method, _, _ in api.behaviour.seen] == ["GET"]  # no retry


@pytest.mark.parametrize(
    ("status", "body", "detail"),
    [
        (500, b"", "POST /v1/completions: HTTP 500"),
        (200, b'{"choices": []}', "POST /v1/completions: HTTP 200 but no choices"),
        (200, b"<html>", "POST /v1/completions: HTTP 200 but the body is not JSON"),
    ],
)
def test_healthy_server_without_a_usable_completion_is_not_ready(
    api: FakeApi, status: int, body: bytes, detail: str
):
    api.behaviour.completion, api.behaviour.body = status, body
    result = attention_api_probe(api.url, "m")()
    assert not result.ready
    assert result.detail == detail
    assert len(api.behaviour.seen) == 2  # one attempt: health, then completion


def test_refused_connection_is_reported_not_raised(closed_port: int):
    result = attention_api_probe(f"http://127.0.0.1:{closed_port}", "m")()
    assert not result.ready
    assert result.detail == "GET /health: connection refused"


def test_slow_completion_times_out_within_the_probe_timeout(api: FakeApi):
    api.behaviour.delay_s = 2.0
    began = time.monotonic()
    result = probe_completion(api.url, "m", timeout_s=0.2)
    assert time.monotonic() - began < 1.5
    assert not result.ready
    assert result.detail == "POST /v1/completions: timed out"


def test_proxy_settings_are_ignored_for_role_servers(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert attention_api_probe(api.url, "m")().ready


def test_health_probe_needs_only_health(api: FakeApi):
    api.behaviour.completion = 500
    assert health_probe(api.url)().ready
    assert [method for method, _, _ in api.behaviour.seen] == ["GET"]


def test_tcp_probe_tells_listening_from_refused(api: FakeApi, closed_port: int):
    assert tcp_probe("127.0.0.1", api.server_address[1])().ready
    refused = tcp_probe("127.0.0.1", closed_port)()
    assert not refused.ready
    assert refused.detail == f"tcp 127.0.0.1:{closed_port}: connection refused"


def test_garbage_on_the_port_is_not_ready_and_does_not_raise():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer_garbage() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH\r\n")

        thread = threading.Thread(target=answer_garbage, daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        result = attention_api_probe(f"http://127.0.0.1:{port}", "m")()
        thread.join(timeout=5)
    assert not result.ready
    assert result.detail.startswith("GET /health: BadStatusLine")
