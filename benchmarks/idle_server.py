# SPDX-License-Identifier: Apache-2.0
"""The stand-in server of ``harness_overhead.py``: listens on 127.0.0.1:PORT,
accepts and closes connections, and exits 0 on SIGTERM, as a role server
does once it is ready. Usage: python benchmarks/idle_server.py --port PORT
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with socket.create_server(("127.0.0.1", port)) as server:
        print(f"listening on 127.0.0.1:{port}", flush=True)
        while True:
            connection, _ = server.accept()
            connection.close()


if __name__ == "__main__":
    sys.exit(main())
