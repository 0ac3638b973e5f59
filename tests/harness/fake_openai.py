# SPDX-License-Identifier: Apache-2.0
"""A threaded stdlib OpenAI-compatible completions server and GSM8K-format items.

Test helper; binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any

from afd_e2e.checks.gsm8k.items import last_question


@dataclass(frozen=True)
class Item:
    """One generated GSM8K-format problem."""

    question: str
    answer: str  # worked solution ending in "#### <number>"
    number: int

    def completion(self, how: str) -> str:
        """What a model answers: 'right', 'wrong', or 'bare' (right, no ####)."""
        if how == "right":
            return " " + self.answer
        if how == "bare":
            return f" After working it out, the total is {self.number} apples."
        worked = self.answer.rsplit("####", 1)[0]
        return f" {worked}#### {self.number + 1}"


def make_items(count: int, offset: int = 0) -> list[Item]:
    items = []
    for i in range(offset, offset + count):
        a, b = 3 + i % 17, 5 + (7 * i) % 23
        total = a + b
        question = (
            f"Problem {i}: Tom has {a} apples and buys {b} more. "
            "How many apples does Tom have now?"
        )
        answer = f"Tom has {a} + {b} = <<{a}+{b}={total}>>{total} apples.\n#### {total}"
        items.append(Item(question, answer, total))
    return items


def write_jsonl(path: Path, items: Sequence[Item]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps({"question": item.question, "answer": item.answer}))
            fh.write("\n")
    return path


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True


class FakeOpenAI:
    """``with FakeOpenAI(answers) as server:`` serves POST /v1/completions.

    ``answers`` maps a question to the completion text; an unknown question
    gets HTTP 404. ``fail_status`` answers every completion with that status
    and ``fail_message`` as the OpenAI-style error message.
    ``hold_for`` makes each request wait (up to 5 s) until that many requests
    have been in flight at once, so a test sees real concurrency or a timeout.
    Any other path is recorded in ``stray`` (a hub probe would show up there).
    """

    def __init__(
        self,
        answers: Mapping[str, str] | Callable[[str], str | None],
        *,
        fail_status: int | None = None,
        fail_message: str = "injected failure",
        delay_s: float = 0.0,
        hold_for: int | None = None,
    ) -> None:
        self._answer = answers if callable(answers) else answers.get
        self.fail_status = fail_status
        self.fail_message = fail_message
        self.delay_s = delay_s
        self.hold_for = hold_for
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.prompts: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.stray: list[str] = []
        self.first_at: float | None = None
        self.last_at: float | None = None
        self._cond = threading.Condition()
        self._sockets: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeOpenAI:
        handler = _make_handler(self)
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        with self._cond:
            for sock in list(self._sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._cond.notify_all()
        self._server.server_close()  # joins every connection thread
        self._thread.join(timeout=10)

    # called by the handler threads
    def _enter(self, sock: socket.socket, body: dict[str, Any]) -> None:
        with self._cond:
            now = time.perf_counter()
            self.first_at = self.first_at if self.first_at is not None else now
            self.requests += 1
            self.bodies.append(body)
            self.prompts.append(str(body.get("prompt", "")))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._cond.notify_all()
            if self.hold_for is not None:
                self._cond.wait_for(
                    lambda: self.max_in_flight >= (self.hold_for or 0), timeout=5.0
                )

    def _leave(self) -> None:
        with self._cond:
            self.in_flight -= 1
            self.last_at = time.perf_counter()

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._cond:
            if add:
                self._sockets.add(sock)
            else:
                self._sockets.discard(sock)


def _make_handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            server._track(self.request, True)

        def finish(self) -> None:
            server._track(self.request, False)
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            server.stray.append(f"GET {self.path}")
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_HEAD(self) -> None:
            server.stray.append(f"HEAD {self.path}")
            self._send(404, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/completions":
                server.stray.append(f"POST {self.path}")
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(raw or b"{}")
            server._enter(self.request, body)
            try:
                if server.delay_s:
                    time.sleep(server.delay_s)
                if server.fail_status is not None:
                    error = {"message": server.fail_message, "code": server.fail_status}
                    self._send(server.fail_status, {"error": error})
                    return
                question = last_question(str(body.get("prompt", "")))
                text = server._answer(question)
                if text is None:
                    self._send(404, {"error": {"message": f"unknown {question!r}"}})
                    return
                self._send(200, _completion(body, text))
            finally:
                server._leave()

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _completion(body: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


# Environment a gate test must not inherit from the developer's shell or CI.
GATE_ENV = (
    "CI",
    "BUILDKITE",
    "AFD_GSM8K_LIMIT",
    "AFD_GSM8K_THRESHOLD",
    "AFD_GSM8K_DATA",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
)


def make_dataset(
    root: Path, right: int, bare: int = 0, wrong: int = 0, train: int = 4
) -> tuple[Path, dict[str, str]]:
    """test.jsonl/train.jsonl under ``root`` and the server's answer table.

    The first ``right`` test items are answered correctly, the next ``bare``
    with the right number but no ``####`` (flexible-extract only), the rest
    wrongly.
    """
    items = make_items(right + bare + wrong)
    write_jsonl(root / "test.jsonl", items)
    write_jsonl(root / "train.jsonl", make_items(train, offset=1000))
    kinds = ["right"] * right + ["bare"] * bare + ["wrong"] * wrong
    pairs = zip(items, kinds, strict=True)
    return root, {item.question: item.completion(kind) for item, kind in pairs}
