# SPDX-License-Identifier: Apache-2.0
"""Counters handed from a server's engine process to its API server through
a directory: the engine writes its counters as one small JSON file per
process, the API server reads the directory at each scrape.

vLLM's API server runs the engine in a process of its own and builds
``/metrics`` from the stats the engine ships to it; AFD's counters live in
the engine's worker (the step clock, the exchanges), so they travel this way
unless prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``)
already carries them. The directory is named once per server by its first
process (``AFD_METRICS_DIR``, set by ``afd_plugin.register``) and inherited by
its engine and workers. Pure: the standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger("afd_plugin")

ENV = "AFD_METRICS_DIR"
FLUSH_INTERVAL_S = 0.1
"""How stale a scrape may be: the writer flushes changed counters this often."""

Key = tuple[str, tuple[tuple[str, str], ...]]
"""(metric name, sorted label pairs)."""


def claim_directory() -> str:
    """Name this server's directory unless one of this process's ancestors
    (the server's API server; the engine for a worker) already did; the
    process that names it removes it when it exits. A name inherited from
    anything else (a shell or test run that loaded the plugin itself) is
    not this server's and is replaced."""
    inherited = os.environ.get(ENV)
    if inherited and _owner(inherited) in _ancestors():
        return inherited
    directory = str(Path(tempfile.gettempdir()) / f"{_PREFIX}{os.getpid()}")
    os.environ[ENV] = directory
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


_PREFIX = "afd-metrics-"


def _owner(directory: str) -> int | None:
    name = Path(directory).name
    if name.startswith(_PREFIX) and name[len(_PREFIX) :].isdigit():
        return int(name[len(_PREFIX) :])
    return None


def _ancestors(limit: int = 16) -> set[int | None]:
    """This process and its ancestors (Linux ``/proc``; elsewhere only the
    parent, enough for the engine of an API server)."""
    pids: set[int | None] = {os.getpid(), os.getppid()}
    pid = os.getppid()
    for _ in range(limit):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 1 or pid in pids:
            break
        pids.add(pid)
    return pids


def key(name: str, labels: dict[str, str]) -> Key:
    return name, tuple(sorted(labels.items()))


class CounterFile:
    """This process's counters, flushed to ``<directory>/<pid>.json`` by a
    daemon thread whenever they changed and once more at exit. The file
    outlives the process (its API server goes on showing the last values,
    a failure's count included, until the server's first process removes the
    directory)."""

    def __init__(self, directory: str) -> None:
        self.path = Path(directory) / f"{os.getpid()}.json"
        self._values: dict[Key, float] = {}
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._write_lock = threading.Lock()
        self._closed = False
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.flush()
        threading.Thread(target=self._run, name="afd-metrics", daemon=True).start()
        atexit.register(self.flush)

    def add(self, name: str, labels: dict[str, str], amount: float = 1.0) -> None:
        k = key(name, labels)
        with self._lock:
            self._values[k] = self._values.get(k, 0.0) + amount
        self._dirty.set()

    def flush(self) -> None:
        with self._lock:
            series = [
                {"name": name, "labels": dict(labels), "value": value}
                for (name, labels), value in self._values.items()
            ]
        tmp = self.path.with_suffix(".tmp")
        with self._write_lock:
            if self._closed:
                return
            try:
                tmp.write_text(json.dumps({"pid": os.getpid(), "series": series}))
                os.replace(tmp, self.path)
            except FileNotFoundError:
                pass  # the server's first process removed the directory: exiting
            except OSError as exc:  # a scrape misses an update; serving goes on
                logger.warning(
                    "afd-plugin: cannot write AFD metrics to %s: %s", tmp, exc
                )

    def close(self) -> None:
        with self._write_lock:
            self._closed = True
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _run(self) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            self.flush()
            time.sleep(FLUSH_INTERVAL_S)


def read_directory(directory: str) -> dict[Key, float]:
    """Every series in ``directory``, summed over the processes that wrote it
    (an unreadable or half-written file is skipped until the next scrape)."""
    totals: dict[Key, float] = {}
    for path in _files(directory):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for s in data.get("series", ()):
            k = key(s["name"], s["labels"])
            totals[k] = totals.get(k, 0.0) + float(s["value"])
    return totals


def _files(directory: str) -> Iterable[Path]:
    try:
        return sorted(Path(directory).glob("*.json"))
    except OSError:
        return ()
