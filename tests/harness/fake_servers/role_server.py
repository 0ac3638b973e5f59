# SPDX-License-Identifier: Apache-2.0
"""A fake role server for the process-manager tests: /health and /v1/completions.

Flags make it misbehave the ways real servers do; it binds only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--port-file", type=Path, help="write the bound port here")
    parser.add_argument("--startup-s", type=float, default=0.0, help="sleep first")
    parser.add_argument("--die-after-s", type=float, help="exit 3 during start-up")
    parser.add_argument("--never-ready", action="store_true", help="/health is 503")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument(
        "--escape-pid-file",
        type=Path,
        help="double-fork a grandchild that calls setsid; write its pid here",
    )
    parser.add_argument(
        "--child", action="store_true", help="spawn a plain child in its group"
    )
    parser.add_argument(
        "--stop-delay-s",
        type=float,
        help="on SIGTERM, take this long to stop (a slow but cooperative role)",
    )
    parser.add_argument(
        "--token-offset",
        type=int,
        default=0,
        help="shift the greedy token ids it answers (a diverging 'model')",
    )
    parser.add_argument(
        "--evidence-role",
        choices=("attention", "ffn"),
        help="log a dual_ubatch evidence record as this role (rank 0) for each "
        "completion request, as a DBO step would",
    )
    return parser.parse_args()


class Handler(BaseHTTPRequestHandler):
    never_ready = False
    token_offset = 0
    evidence_role: str | None = None
    steps = 0

    def _send(self, status: int, body: dict[str, object]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/health":
            self._send(503 if self.never_ready else 200, {})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/completions" or self.never_ready:
            self._send(404, {"error": "not found"})
            return
        prompts = request.get("prompt", "")
        prompts = prompts if isinstance(prompts, list) else [prompts]
        count = int(request.get("max_tokens", 1))
        choices = []
        for index, prompt in enumerate(prompts):
            # Deterministic "greedy" ids derived from the prompt, like a model.
            ids = [
                (len(prompt) * 7 + k + self.token_offset) % 500 for k in range(count)
            ]
            choices.append(
                {
                    "index": index,
                    "text": " world",
                    "token_ids": ids,
                    "finish_reason": "length",
                }
            )
        if self.evidence_role is not None:
            from afd_plugin.evidence import format_dual_ubatch

            Handler.steps += 1
            record = format_dual_ubatch(self.evidence_role, 0, Handler.steps, [1, 1])
            print(f"INFO step runner: {record}", flush=True)
        self._send(200, {"model": request.get("model"), "choices": choices})

    def log_message(self, format: str, *args: object) -> None:
        print(f"{self.command} {self.path}", flush=True)


def escape(pid_file: Path) -> None:
    """Double-fork: the grandchild leaves the group (setsid), keeps the env."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            tmp = pid_file.with_suffix(".tmp")
            tmp.write_text(str(os.getpid()))
            tmp.rename(pid_file)
            print(f"escaped grandchild pid {os.getpid()}", flush=True)
            while True:
                time.sleep(1)
        os._exit(0)
    os.wait()


def main() -> int:
    args = parse_args()
    print(f"fake role server pid {os.getpid()} starting", flush=True)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif args.stop_delay_s is not None:
        delay = args.stop_delay_s

        def slow_stop(signum: int, frame: object) -> None:
            time.sleep(delay)
            os._exit(0)

        signal.signal(signal.SIGTERM, slow_stop)
    if args.escape_pid_file:
        escape(args.escape_pid_file)
    if args.child:
        import subprocess

        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if args.die_after_s is not None:
        time.sleep(args.die_after_s)
        print("fatal: cannot load the model weights", flush=True)
        return 3
    time.sleep(args.startup_s)
    Handler.never_ready = args.never_ready
    Handler.token_offset = args.token_offset
    Handler.evidence_role = args.evidence_role
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(str(port))
        tmp.rename(args.port_file)
    print(f"serving on 127.0.0.1:{port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
