# SPDX-License-Identifier: Apache-2.0
"""The harness's one client for vLLM's completions API: greedy token ids of
one request, any request body's answer, and a stream a client may hang up
on; straight to the server (no proxy) and never retried.

Failures surface as they come: ``OSError`` (urllib's HTTP and URL errors
included) for the transport, ``ValueError`` for an answer of the wrong shape;
callers word them for their own users.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def greedy_token_ids(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    max_tokens: int,
    timeout_s: float,
    dp_rank: int | None = None,
) -> list[list[int]]:
    """Generated token ids per prompt of one request (temperature 0,
    ``ignore_eos``), in prompt order; ``dp_rank`` routes it to that DP rank
    of the server (vLLM's ``X-data-parallel-rank`` header)."""
    body = {
        "model": model,
        "prompt": prompts[0] if len(prompts) == 1 else list(prompts),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "return_token_ids": True,
        "ignore_eos": True,
    }
    headers = {} if dp_rank is None else {"X-data-parallel-rank": str(dp_rank)}
    answer = post_completion(base_url, body, timeout_s, headers)
    choices = sorted(answer.get("choices", []), key=lambda c: c.get("index", 0))
    if len(choices) != len(prompts):
        raise ValueError(f"{len(choices)} choices for {len(prompts)} prompt(s)")
    ids = [c.get("token_ids") for c in choices]
    if not all(isinstance(i, list) for i in ids):
        raise ValueError("no token_ids in the answer (return_token_ids)")
    return [[int(t) for t in i] for i in ids]


def _request(
    base_url: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> urllib.request.Request:
    return urllib.request.Request(
        base_url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )


def post_completion(
    base_url: str,
    body: Mapping[str, Any],
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The server's JSON answer to one completions request, as it came."""
    request = _request(base_url, body, headers)
    with _OPENER.open(request, timeout=timeout_s) as response:
        return json.loads(response.read())


@dataclass(frozen=True)
class StreamOutcome:
    """What one streaming client saw."""

    text: str
    chunks: int
    """Chunks with text received before the end or the hang-up."""
    finish_reason: str | None
    """The server's, or None when the client hung up first (or the server
    closed the stream without one)."""
    token_ids: tuple[int, ...] = ()
    """The generated ids, when the body asks for ``return_token_ids``."""


class StreamError(OSError):
    """The server ended a stream with an error event (``data: {"error": ...}``)."""


def stream_completion(
    base_url: str,
    body: Mapping[str, Any],
    timeout_s: float,
    hang_up_after: int | None = None,
    on_tokens: Callable[[int], None] | None = None,
) -> StreamOutcome:
    """Stream one completion (``stream: true`` is set here); with
    ``hang_up_after`` the client closes its connection after that many text
    chunks, as a client that goes away mid-generation does (its own
    connection, closed at once, so the server sees the hang-up).
    ``on_tokens`` is told the count of ids received so far after each chunk
    that carried some (``return_token_ids``). An error event raises
    :class:`StreamError`."""
    url = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(
        url.hostname or "127.0.0.1", url.port, timeout=timeout_s
    )
    text: list[str] = []
    ids: list[int] = []
    finish: str | None = None
    try:
        connection.request(
            "POST",
            url.path.rstrip("/") + "/v1/completions",
            body=json.dumps({**body, "stream": True}),
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        if response.status != 200:
            raise OSError(f"HTTP {response.status}: {response.read()[:500]!r}")
        while line := response.readline():
            data = line.decode().strip()
            if not data.startswith("data:"):
                continue
            data = data[len("data:") :].strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            if "error" in event:
                raise StreamError(f"error event after {len(ids)} ids: {event['error']}")
            choice = event["choices"][0]
            if choice.get("text"):
                text.append(choice["text"])
            if choice.get("token_ids"):
                ids += [int(t) for t in choice["token_ids"]]
                if on_tokens is not None:
                    on_tokens(len(ids))
            finish = choice.get("finish_reason") or finish
            if hang_up_after is not None and len(text) >= hang_up_after:
                finish = None
                break
    finally:
        connection.close()
    return StreamOutcome("".join(text), len(text), finish, tuple(ids))
