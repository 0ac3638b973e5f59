# SPDX-License-Identifier: Apache-2.0
"""Bounded soak of a 1A1F AFD deployment on the CPU: steady concurrent load,
no failed request, each role's resident memory and open files flat over time.

Concurrent no-retry clients send greedy /v1/completions requests (streaming
or not, prompts of varying length) for a fixed time; the RSS and open file
descriptors of each role's whole process tree are sampled meanwhile. The
first minute is compared with the last one (the first and last third when
the run is shorter than two minutes); everything started is stopped at the
end.

Usage: python benchmarks/soak.py [--arch qwen3_moe] [--duration-s 240]
       [--concurrency 16] [--sample-every-s 5] [--write]
Exits 0 when every verdict passes, 1 otherwise; with --write, the figures go
to benchmarks/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from afd_e2e.launch.plan import cpu_share, host_cpus
from afd_e2e.processes.servers import (
    CPU_ENV,
    ServerTeardownError,
    VllmServer,
    VllmServers,
)
from afd_e2e.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ROLES = ("attention", "ffn")
PROMPT_TOKENS = (16, 200)
MAX_TOKENS = (16, 64)
FIRST_SPECIAL_TOKENS = 3
"""Token ids below this are the tiny tokenizer's special tokens."""
REQUEST_TIMEOUT_S = 120.0
RSS_BAND = (0.9, 1.1)
FD_SLACK = 8
WINDOW_S = 60.0
MIN_MINUTE_RUN_S = 120.0
ERRORS_KEPT = 5
MIB = 1024 * 1024

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# -- load -------------------------------------------------------------------


@dataclass
class Tally:
    """Requests finished by all clients (thread-safe)."""

    ok: int = 0
    failed: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def success(self, tokens: int) -> None:
        with self.lock:
            self.ok += 1
            self.tokens += tokens

    def failure(self, text: str) -> None:
        with self.lock:
            self.failed += 1
            if len(self.errors) < ERRORS_KEPT:
                self.errors.append(text[:300])

    def done(self) -> int:
        with self.lock:
            return self.ok + self.failed


def random_request(rng: random.Random, model: str, vocab: int) -> dict[str, Any]:
    """A greedy request body: random token ids as the prompt, a random
    length, streaming or not."""
    length = rng.randint(*PROMPT_TOKENS)
    body: dict[str, Any] = {
        "model": model,
        "prompt": [rng.randrange(FIRST_SPECIAL_TOKENS, vocab) for _ in range(length)],
        "max_tokens": rng.randint(*MAX_TOKENS),
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": rng.random() < 0.5,
    }
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    return body


def post(base_url: str, body: dict[str, Any]) -> Any:
    """Open one POST /v1/completions (never retried); the response."""
    request = urllib.request.Request(
        base_url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    return _OPENER.open(request, timeout=REQUEST_TIMEOUT_S)


def sse_events(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent event stream up to ``[DONE]``."""
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)
    raise ValueError("the stream ended without [DONE]")


def streamed_tokens(response: Any) -> int:
    """Completion tokens of a streamed answer (its usage event), checking
    that text chunks came."""
    chunks, usage = 0, None
    for event in sse_events(response):
        chunks += len(event.get("choices") or [])
        usage = event.get("usage") or usage
    if chunks == 0 or usage is None:
        raise ValueError(f"stream with {chunks} chunks, usage {usage!r}")
    return int(usage["completion_tokens"])


def whole_tokens(response: Any) -> int:
    """Completion tokens of a non-streamed answer, checking its shape."""
    answer = json.loads(response.read())
    choices = answer.get("choices")
    if not isinstance(choices, list) or len(choices) != 1:
        raise ValueError(f"answer without one choice: {str(answer)[:200]}")
    if not isinstance(choices[0].get("text"), str):
        raise ValueError("choice without text")
    return int(answer["usage"]["completion_tokens"])


def one_request(base_url: str, body: dict[str, Any]) -> int:
    """Send one request; its completion tokens. Raises on any failure,
    including an answer with another token count than asked (ignore_eos)."""
    with post(base_url, body) as response:
        tokens = streamed_tokens(response) if body["stream"] else whole_tokens(response)
    if tokens != body["max_tokens"]:
        raise ValueError(f"{tokens} completion tokens, asked {body['max_tokens']}")
    return tokens


def client_loop(
    base_url: str,
    model: str,
    vocab: int,
    seed: int,
    keep_going: Callable[[], bool],
    tally: Tally,
) -> None:
    """One client: requests back to back while ``keep_going()``."""
    rng = random.Random(seed)
    while keep_going():
        body = random_request(rng, model, vocab)
        try:
            tally.success(one_request(base_url, body))
        except Exception as exc:  # any failure counts; the load goes on
            tally.failure(f"{type(exc).__name__}: {exc}")


def start_clients(
    concurrency: int,
    base_url: str,
    model: str,
    vocab: int,
    seed: int,
    keep_going: Callable[[], bool],
    tally: Tally,
) -> list[threading.Thread]:
    threads = [
        threading.Thread(
            target=client_loop,
            args=(base_url, model, vocab, seed + i, keep_going, tally),
            name=f"soak-client-{i}",
            daemon=True,
        )
        for i in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    return threads


# -- sampling ---------------------------------------------------------------


def process_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants (none once it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_usage(pid: int) -> tuple[int, int]:
    """Summed RSS bytes and open file descriptors of ``pid``'s tree."""
    rss = fds = 0
    for proc in process_tree(pid):
        try:
            rss += proc.memory_info().rss
            fds += proc.num_fds()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rss, fds


def take_sample(
    elapsed_s: float, roles: dict[str, VllmServer], tally: Tally
) -> dict[str, Any]:
    usage = {role: tree_usage(server.pid) for role, server in roles.items()}
    return {
        "t_s": round(elapsed_s, 1),
        "rss_mib": {r: round(u[0] / MIB, 1) for r, u in usage.items()},
        "fds": {r: u[1] for r, u in usage.items()},
        "requests_done": tally.done(),
    }


def sample_until(
    deadline: float,
    started: float,
    every_s: float,
    roles: dict[str, VllmServer],
    tally: Tally,
) -> list[dict[str, Any]]:
    """Samples every ``every_s`` from now to ``deadline`` (both included)."""
    samples = []
    while True:
        now = time.monotonic()
        samples.append(take_sample(now - started, roles, tally))
        if now >= deadline:
            return samples
        time.sleep(min(every_s, max(0.0, deadline - now)))


# -- verdict ----------------------------------------------------------------


def window_s(duration_s: float) -> tuple[float, str]:
    """The length of the first and last windows compared, and their name."""
    if duration_s >= MIN_MINUTE_RUN_S:
        return WINDOW_S, "minute"
    return duration_s / 3, "third"


def split_windows(
    samples: list[dict[str, Any]], duration_s: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    width, _ = window_s(duration_s)
    end = samples[-1]["t_s"]
    first = [s for s in samples if s["t_s"] <= width]
    last = [s for s in samples if s["t_s"] >= end - width]
    return first, last


def role_verdict(
    role: str, first: list[dict[str, Any]], last: list[dict[str, Any]]
) -> dict[str, Any]:
    rss_first = statistics.mean(s["rss_mib"][role] for s in first)
    rss_last = statistics.mean(s["rss_mib"][role] for s in last)
    ratio = rss_last / rss_first if rss_first else float("inf")
    fds_first = max(s["fds"][role] for s in first)
    fds_last = max(s["fds"][role] for s in last)
    rss_ok = RSS_BAND[0] <= ratio <= RSS_BAND[1]
    fds_ok = fds_last <= fds_first + FD_SLACK
    return {
        "rss_first_mib": round(rss_first, 1),
        "rss_last_mib": round(rss_last, 1),
        "rss_ratio": round(ratio, 4),
        "fds_first_max": fds_first,
        "fds_last_max": fds_last,
        "rss_ok": rss_ok,
        "fds_ok": fds_ok,
        "ok": rss_ok and fds_ok,
    }


def verdicts(samples: list[dict[str, Any]], duration_s: float) -> dict[str, Any]:
    first, last = split_windows(samples, duration_s)
    return {role: role_verdict(role, first, last) for role in ROLES}


def table(per_role: dict[str, Any]) -> str:
    head = ["role", "rss first MiB", "rss last MiB", "ratio"]
    head += ["fds first max", "fds last max", "verdict"]
    rows = [head]
    for role, v in per_role.items():
        rows.append(
            [
                role,
                f"{v['rss_first_mib']:.1f}",
                f"{v['rss_last_mib']:.1f}",
                f"{v['rss_ratio']:.3f}",
                str(v["fds_first_max"]),
                str(v["fds_last_max"]),
                "pass" if v["ok"] else "FAIL",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    )


# -- run --------------------------------------------------------------------


def start_deployment(servers: VllmServers, model: Path) -> dict[str, VllmServer]:
    """A 1A1F AFD pair, the host's CPUs shared by its two roles; both ready."""
    env = {"OMP_NUM_THREADS": str(cpu_share(host_cpus(), 2))}
    ffn, attention = servers.afd_pair(model, env=env)
    attention.wait_ready()
    ffn.wait_ready()
    return {"attention": attention, "ffn": ffn}


def warm_up(attention: VllmServer, vocab: int, tally: Tally) -> None:
    """One request at each end of the prompt lengths, before the clock."""
    for length in PROMPT_TOKENS:
        body = {
            "model": attention.model,
            "prompt": [FIRST_SPECIAL_TOKENS + i % 100 for i in range(length)],
            "max_tokens": MAX_TOKENS[1],
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": False,
        }
        try:
            tally.success(one_request(attention.base_url, body))
        except Exception as exc:  # counted like any other failure
            tally.failure(f"warm-up {type(exc).__name__}: {exc}")


def run_load(
    roles: dict[str, VllmServer], vocab: int, args: argparse.Namespace
) -> dict[str, Any]:
    """The timed load with its samples; the clients are stopped on return,
    however it returns."""
    attention = roles["attention"]
    tally = Tally()
    warm_up(attention, vocab, tally)
    stop = threading.Event()
    started = time.monotonic()
    deadline = started + args.duration_s

    def keep_going() -> bool:
        return not stop.is_set() and time.monotonic() < deadline

    threads = start_clients(
        args.concurrency,
        attention.base_url,
        attention.model,
        vocab,
        args.seed,
        keep_going,
        tally,
    )
    try:
        samples = sample_until(deadline, started, args.sample_every_s, roles, tally)
    finally:
        stop.set()
    for thread in threads:
        thread.join(REQUEST_TIMEOUT_S + 5)
    elapsed = time.monotonic() - started
    hung = sum(t.is_alive() for t in threads)
    if hung:
        tally.failure(f"{hung} client(s) still in a request after the run")
    return {"tally": tally, "samples": samples, "elapsed_s": elapsed}


def soak(args: argparse.Namespace, model: Path, logs: Path) -> dict[str, Any]:
    """Start the deployment, load it, sample it; stopped on leaving, even
    on errors or Ctrl-C (ServerTeardownError when that was not clean)."""
    vocab = int(json.loads((model / "config.json").read_text())["vocab_size"])
    with VllmServers(logs, env=CPU_ENV) as servers:
        roles = start_deployment(servers, model)
        print(f"ready; {args.concurrency} clients for {args.duration_s:.0f} s")
        return run_load(roles, vocab, args)


def summary(
    args: argparse.Namespace, model: Path, run: dict[str, Any]
) -> dict[str, Any]:
    tally: Tally = run["tally"]
    per_role = verdicts(run["samples"], args.duration_s)
    width, unit = window_s(args.duration_s)
    return {
        "what": "bounded soak of AFD 1A1F on the CPU: concurrent greedy "
        "completions, RSS and open fds of each role's process tree",
        "model": model.name,
        "arch": args.arch,
        "cpus": host_cpus(),
        "duration_s": args.duration_s,
        "elapsed_s": round(run["elapsed_s"], 1),
        "concurrency": args.concurrency,
        "sample_every_s": args.sample_every_s,
        "compared": f"first vs last {unit} ({width:.0f} s)",
        "requests": {"ok": tally.ok, "failed": tally.failed},
        "first_errors": tally.errors,
        "completion_tokens": tally.tokens,
        "tokens_per_s": round(tally.tokens / run["elapsed_s"], 1),
        "verdicts": per_role,
        "passed": tally.failed == 0 and all(v["ok"] for v in per_role.values()),
        "samples": run["samples"],
    }


def report(result: dict[str, Any]) -> None:
    print(f"compared: {result['compared']}")
    print(table(result["verdicts"]))
    requests = result["requests"]
    print(
        f"requests: {requests['ok']} ok, {requests['failed']} failed; "
        f"{result['tokens_per_s']:.1f} completion tokens/s "
        f"over {result['elapsed_s']:.0f} s"
    )
    for error in result["first_errors"]:
        print(f"  error: {error}")
    print("verdict:", "PASS" if result["passed"] else "FAIL")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="deepseek_v2", help="or qwen3_moe")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration-s", type=float, default=240.0)
    parser.add_argument("--sample-every-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--write", action="store_true", help="write benchmarks/results/soak.json"
    )
    parser.add_argument(
        "--log-dir", type=Path, help="keep the server logs here (default: discard)"
    )
    args = parser.parse_args(argv)
    if args.duration_s <= 0 or args.concurrency < 1 or args.sample_every_s <= 0:
        parser.error("duration, concurrency and sample interval must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = build_tiny_model(args.arch)
    try:
        if args.log_dir is not None:
            run = soak(args, model, args.log_dir)
        else:
            with tempfile.TemporaryDirectory(prefix="afd-soak-") as logs:
                run = soak(args, model, Path(logs))
    except ServerTeardownError as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    result = summary(args, model, run)
    report(result)
    if args.write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / "soak.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
