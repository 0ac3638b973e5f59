# SPDX-License-Identifier: Apache-2.0
"""The harness's one client for vLLM's completions API: greedy token ids of
one request, straight to the server (no proxy) and never retried.

Failures surface as they come: ``OSError`` (urllib's HTTP and URL errors
included) for the transport, ``ValueError`` for an answer of the wrong shape;
callers word them for their own users.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def greedy_token_ids(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    max_tokens: int,
    timeout_s: float,
) -> list[list[int]]:
    """Generated token ids per prompt of one request (temperature 0,
    ``ignore_eos``), in prompt order."""
    body = {
        "model": model,
        "prompt": prompts[0] if len(prompts) == 1 else list(prompts),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "return_token_ids": True,
        "ignore_eos": True,
    }
    request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with _OPENER.open(request, timeout=timeout_s) as response:
        answer = json.loads(response.read())
    choices = sorted(answer.get("choices", []), key=lambda c: c.get("index", 0))
    if len(choices) != len(prompts):
        raise ValueError(f"{len(choices)} choices for {len(prompts)} prompt(s)")
    ids = [c.get("token_ids") for c in choices]
    if not all(isinstance(i, list) for i in ids):
        raise ValueError("no token_ids in the answer (return_token_ids)")
    return [[int(t) for t in i] for i in ids]
