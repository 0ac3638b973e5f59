# SPDX-License-Identifier: Apache-2.0
"""Cancel and recover: many streaming clients at once, half of them hanging up
mid-generation; the deployment must drop the abandoned requests, finish the
others, and then answer a fresh batch with the same tokens as before the
storm (and as the colocated reference, where the run has one): both roles
still in step, nothing restarted.

"HTTP 200 or a live process alone is not a pass": the figures are what the
clients saw and what vLLM's own gauge says is still running.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from afd_e2e.checks.completions import StreamOutcome, stream_completion
from afd_e2e.checks.metrics import metric_sum, scrape
from afd_e2e.checks.parity import PROMPTS, ParityError, compare, greedy_tokens

RUNNING = "vllm:num_requests_running"
GENERATED = "vllm:generation_tokens_total"
"""vLLM's count of generated tokens: the storm asks for ``streams *
max_tokens``; a hung-up request that vLLM really dropped leaves some of its
share ungenerated (vLLM 0.32 counts no client abort in its finished-request
counter)."""


@dataclass(frozen=True)
class CancelRecoverOutcome:
    passed: bool
    message: str
    figures: dict[str, float | int]


def _storm(
    base_url: str,
    model: str,
    streams: int,
    hang_up_after: int,
    max_tokens: int,
    timeout_s: float,
) -> dict[int, StreamOutcome | BaseException]:
    """``streams`` concurrent streaming clients; the odd ones hang up."""
    outcomes: dict[int, StreamOutcome | BaseException] = {}
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0.0}

    def client(i: int) -> None:
        try:
            outcomes[i] = stream_completion(
                base_url,
                {**body, "prompt": PROMPTS[i % len(PROMPTS)], "ignore_eos": True},
                timeout_s,
                hang_up_after if i % 2 else None,
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            outcomes[i] = exc

    threads = [
        threading.Thread(target=client, args=(i,), daemon=True) for i in range(streams)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    return outcomes


def _drain(base_url: str, timeout_s: float) -> float | None:
    """Seconds until vLLM runs no request, or None past ``timeout_s``."""
    start = time.monotonic()
    while metric_sum(scrape(base_url), RUNNING) > 0:
        if time.monotonic() - start > timeout_s:
            return None
        time.sleep(0.25)
    return time.monotonic() - start


def run_cancel_recover(
    base_url: str,
    model: str,
    *,
    streams: int,
    hang_up_after: int,
    max_tokens: int,
    reference_url: str | None,
    check_tokens: int = 16,
    timeout_s: float = 300.0,
) -> CancelRecoverOutcome:
    """The storm, the drain, then the fresh batch compared token for token."""
    prompts = list(PROMPTS[:4])
    try:
        before = greedy_tokens(base_url, model, prompts, check_tokens)
    except ParityError as exc:
        return CancelRecoverOutcome(False, f"before the storm: {exc}", {})
    generated_before = metric_sum(scrape(base_url), GENERATED)
    outcomes = _storm(base_url, model, streams, hang_up_after, max_tokens, timeout_s)
    errors = {i: o for i, o in outcomes.items() if isinstance(o, BaseException)}
    kept = [o for i, o in outcomes.items() if i % 2 == 0 and i not in errors]
    unfinished = [o for o in kept if o.finish_reason != "length"]
    figures: dict[str, float | int] = {
        "streams": streams,
        "hung_up": sum(1 for i in outcomes if i % 2),
        "finished": len(kept) - len(unfinished),
        "client_errors": len(errors) + (streams - len(outcomes)),
    }
    if figures["client_errors"]:
        first = next(iter(errors.values()), "a client never returned")
        return CancelRecoverOutcome(
            False, f"FAIL cancel_recover: a client failed: {first!r}", figures
        )
    if unfinished:
        return CancelRecoverOutcome(
            False,
            f"FAIL cancel_recover: {len(unfinished)} kept stream(s) ended "
            f"early ({unfinished[0].finish_reason!r} after "
            f"{unfinished[0].chunks} chunks)",
            figures,
        )
    drained = _drain(base_url, 60.0)
    if drained is None:
        return CancelRecoverOutcome(
            False,
            f"FAIL cancel_recover: {RUNNING} still > 0 60 s after the clients left",
            figures,
        )
    figures["drain_s"] = round(drained, 2)
    generated = metric_sum(scrape(base_url), GENERATED) - generated_before
    figures["tokens_not_generated"] = int(streams * max_tokens - generated)
    if figures["tokens_not_generated"] <= 0:
        return CancelRecoverOutcome(
            False,
            f"FAIL cancel_recover: vLLM generated all {int(generated)} tokens the "
            "storm asked for: no hung-up request was dropped (ask for more "
            "max_tokens)",
            figures,
        )
    try:
        after = greedy_tokens(base_url, model, prompts, check_tokens)
        reference = (
            greedy_tokens(reference_url, model, prompts, check_tokens)
            if reference_url
            else before
        )
    except ParityError as exc:
        return CancelRecoverOutcome(
            False, f"FAIL cancel_recover: after: {exc}", figures
        )
    if after != before:
        return CancelRecoverOutcome(
            False,
            "FAIL cancel_recover: the fresh batch's tokens differ from the same "
            "prompts before the storm",
            figures,
        )
    parity = compare(reference, after)
    figures["recovered_prompts"] = parity.prompts - parity.mismatches
    if not parity.passed:
        return CancelRecoverOutcome(
            False, f"FAIL cancel_recover: {parity.message}", figures
        )
    return CancelRecoverOutcome(
        True,
        f"PASS cancel_recover {streams} streams, {figures['hung_up']} hung up "
        f"({figures['tokens_not_generated']} tokens never generated), "
        f"{figures['finished']} finished; "
        f"a fresh batch of {parity.prompts} "
        "prompts matches "
        + ("the colocated run" if reference_url else "the same prompts before"),
        figures,
    )
