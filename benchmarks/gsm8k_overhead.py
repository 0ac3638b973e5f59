# SPDX-License-Identifier: Apache-2.0
"""Requests per second the GSM8K runner sustains, as a ratio to a bare HTTP loop.

Both drive the same instant fake completions server at the same concurrency with
the same request bodies, interleaved, in this run. The server (asyncio, its own
process) answers each GSM8K question right at once, so the clients are the
bottleneck; each client runs in its own process. The rate is what the server
observed between its first and last request; lm-eval's start-up is reported
separately as end-to-end time.
Usage: python benchmarks/gsm8k_overhead.py [--requests N] [--concurrency C]
       [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from afd_e2e.checks.gsm8k import Gsm8kRequest, completions_url, run_gsm8k
from afd_e2e.checks.gsm8k.items import last_question, write_items


def make_dataset(root: Path, count: int) -> tuple[Path, dict[str, str]]:
    """Generated test/train splits and the right answer to every test item."""
    write_items(root, test=count, train=8)
    lines = (root / "test.jsonl").read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines]
    return root, {item["question"]: " " + item["answer"] for item in items}


# ---------------------------------------------------------------- the server
def serve(answers_path: str) -> None:
    """An instant OpenAI-compatible completions server; prints its port."""
    answers: dict[str, str] = json.loads(Path(answers_path).read_text())
    stats: dict[str, Any] = {}

    def reset() -> None:
        stats.update(requests=0, first=None, last=None, open=0, max_open=0)
        stats["bodies"] = []

    def route(method: str, path: str, body: bytes) -> tuple[int, object]:
        if method == "POST" and path == "/v1/completions":
            now = time.perf_counter()
            request = json.loads(body)
            stats["requests"] += 1
            stats["first"] = stats["first"] if stats["first"] is not None else now
            stats["last"] = now
            stats["bodies"].append(request)
            text = answers.get(last_question(request["prompt"]), " #### 0")
            choice = {"index": 0, "text": text, "finish_reason": "stop"}
            return 200, {"object": "text_completion", "choices": [choice]}
        if path == "/stats":
            return 200, {k: v for k, v in stats.items() if k != "bodies"}
        if path == "/bodies":
            return 200, stats["bodies"]
        if path == "/reset":
            reset()
            return 200, {}
        return 404, {"error": path}

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        stats["open"] += 1
        stats["max_open"] = max(stats["max_open"], stats["open"])
        try:
            while line := await reader.readline():
                method, path, _ = line.decode().split(" ", 2)
                length = 0
                while (header := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                status, payload = route(method, path, await reader.readexactly(length))
                data = json.dumps(payload).encode()
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (status, len(data), data)
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            stats["open"] -= 1
            writer.close()

    async def main() -> None:
        reset()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def call(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


# ---------------------------------------------------------------- the clients
def bare_client(url: str, bodies_path: str, concurrency: int) -> None:
    """The reference: aiohttp, a semaphore, post each body, read the JSON."""
    import aiohttp

    bodies = json.loads(Path(bodies_path).read_text())

    async def run() -> None:
        sem = asyncio.Semaphore(concurrency)
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(body: dict[str, object]) -> None:
                async with sem, session.post(url, json=body) as response:
                    response.raise_for_status()
                    await response.json()

            await asyncio.gather(*(one(body) for body in bodies))

    asyncio.run(run())


def observed(url: str, requests: int) -> dict[str, float]:
    stats = call(url, "/stats")
    if stats["requests"] != requests:
        raise SystemExit(f"server saw {stats['requests']} requests, not {requests}")
    span = stats["last"] - stats["first"]
    return {"rate": requests / span, "span_s": span, "max_open": stats["max_open"]}


def runner_round(
    url: str, work: Path, data: Path, requests: int, concurrency: int
) -> dict[str, float]:
    call(url, "/reset")
    start = time.perf_counter()
    result = run_gsm8k(
        Gsm8kRequest(
            base_url=url,
            model="bench",
            samples=requests,
            threshold=1.0,
            concurrency=concurrency,
            fewshot=8,
            data=data,
            out_dir=Path(tempfile.mkdtemp(dir=work)),
        ),
        stream=io.StringIO(),
    )
    end_to_end = time.perf_counter() - start
    if not result.passed:
        raise SystemExit(f"runner round failed: {result.message}")
    (work / "bodies.json").write_text(json.dumps(call(url, "/bodies")))
    return {**observed(url, requests), "end_to_end_s": end_to_end}


def bare_round(
    url: str, work: Path, requests: int, concurrency: int
) -> dict[str, float]:
    call(url, "/reset")
    client = [sys.executable, __file__, "--bare-client", completions_url(url)]
    subprocess.run([*client, str(work / "bodies.json"), str(concurrency)], check=True)
    return observed(url, requests)


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--bare-client":
        bare_client(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    runner: list[dict[str, float]] = []
    bare: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="gsm8k-overhead-") as tmp:
        work = Path(tmp)
        data, answers = make_dataset(work / "data", args.requests)
        (work / "answers.json").write_text(json.dumps(answers))
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(work / "answers.json")],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            url = f"http://127.0.0.1:{int(server.stdout.readline())}"
            for _ in range(args.rounds):  # interleaved: noise hits both alike
                runner.append(
                    runner_round(url, work, data, args.requests, args.concurrency)
                )
                bare.append(bare_round(url, work, args.requests, args.concurrency))
        finally:
            server.terminate()
            server.wait(timeout=10)
    med = {
        name: {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        for name, rounds in (("runner", runner), ("bare", bare))
    }
    ratio = med["runner"]["rate"] / med["bare"]["rate"]
    print(
        f"gsm8k overhead: {args.requests} requests, concurrency {args.concurrency}, "
        f"8-shot, instant fake server, median of {args.rounds} interleaved rounds"
    )
    for label, name in (("bare aiohttp loop", "bare"), ("afd-e2e gsm8k", "runner")):
        row = med[name]
        extra = (
            f"; {row['end_to_end_s']:.1f} s end to end with lm-eval start-up"
            if name == "runner"
            else ""
        )
        print(
            f"  {label:18}: {row['rate']:8.1f} req/s ({row['span_s']:.2f} s, "
            f"{row['max_open']:.0f} connections){extra}"
        )
    print(f"  {'ratio runner/bare':18}: {ratio:8.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "median": med, "ratio": ratio}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
