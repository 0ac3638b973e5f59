# SPDX-License-Identifier: Apache-2.0
"""One Linux network namespace per logical node, joined by a private bridge
that exists only on this machine, so that the nodes of a placement have
different addresses and talk through real interfaces, not loopback.

Layout for a run (names derive from the run id, so runs never collide)::

    bridge afdb<h>  10.X.Y.254/24   (this namespace: the harness probes from here)
      veth afdv<h><i>  <->  afd0 in namespace afd-<h>-<node>, 10.X.Y.<i+1>/24

Needs root (CAP_NET_ADMIN) and the ``ip`` tool; :meth:`NodeNetwork.unavailable`
says why not where they are missing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence

NODE_INTERFACE = "afd0"
"""The interface of every node namespace (its collectives use it)."""


def _ip(*args: str, namespace: str | None = None) -> subprocess.CompletedProcess:
    argv = ["ip", *(("netns", "exec", namespace, "ip") if namespace else ()), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


class NodeNetworkError(RuntimeError):
    """Setting up or removing the namespaces failed; the message quotes ``ip``."""


class NodeNetwork:
    """The namespaces and bridge of one run; :meth:`create`, then :meth:`destroy`."""

    def __init__(self, run_id: str, nodes: Sequence[str]) -> None:
        digest = hashlib.sha256(run_id.encode()).digest()
        self.tag = digest[:3].hex()
        self.subnet = f"10.{100 + digest[3] % 100}.{digest[4]}"
        self.bridge = f"afdb{self.tag}"
        self.nodes = tuple(nodes)
        self.namespaces = {n: f"afd-{self.tag}-{n}" for n in self.nodes}
        self.addresses = {n: f"{self.subnet}.{i + 1}" for i, n in enumerate(self.nodes)}
        self._created: list[tuple[str, str]] = []

    @staticmethod
    def unavailable() -> str | None:
        """Why namespaces cannot be made here, or None when they can."""
        if shutil.which("ip") is None:
            return "the 'ip' tool (iproute2) is not installed"
        if os.geteuid() != 0:
            return "creating network namespaces needs root (CAP_NET_ADMIN)"
        probe = f"afd-probe-{os.getpid()}"
        made = _ip("netns", "add", probe)
        if made.returncode != 0:
            return f"'ip netns add' is refused here: {made.stderr.strip()}"
        _ip("netns", "del", probe)
        return None

    def _run(self, *args: str, namespace: str | None = None) -> None:
        done = _ip(*args, namespace=namespace)
        if done.returncode != 0:
            where = f" in {namespace}" if namespace else ""
            raise NodeNetworkError(
                f"ip {' '.join(args)}{where} failed: {done.stderr.strip()}"
            )

    def create(self) -> None:
        """Bridge, namespaces, one veth pair each; undone when a step fails."""
        try:
            self._run("link", "add", self.bridge, "type", "bridge")
            self._created.append(("link", self.bridge))
            self._run("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
            self._run("link", "set", self.bridge, "up")
            for index, node in enumerate(self.nodes):
                ns = self.namespaces[node]
                host_end, node_end = f"afdv{self.tag}{index}", f"afdp{self.tag}{index}"
                self._run("netns", "add", ns)
                self._created.append(("netns", ns))
                self._run("link", "add", host_end, "type", "veth", "peer", node_end)
                self._created.append(("link", host_end))
                self._run("link", "set", node_end, "netns", ns)
                self._run("link", "set", host_end, "master", self.bridge)
                self._run("link", "set", host_end, "up")
                self._run("link", "set", node_end, "name", NODE_INTERFACE, namespace=ns)
                address = f"{self.addresses[node]}/24"
                self._run("addr", "add", address, "dev", NODE_INTERFACE, namespace=ns)
                self._run("link", "set", NODE_INTERFACE, "up", namespace=ns)
                self._run("link", "set", "lo", "up", namespace=ns)
        except BaseException:
            self.destroy()
            raise

    @staticmethod
    def existing() -> list[str]:
        """Namespaces of this harness present on the machine now (leftovers)."""
        done = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, timeout=30
        )
        names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
        return [n for n in names if n.startswith("afd-")]

    def wrap(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node``'s namespace (``ip netns exec`` execs
        it, so the pid, session and group stay the server's own)."""
        return ["ip", "netns", "exec", self.namespaces[node], *argv]

    def env(self, node: str) -> dict[str, str]:
        """The node's collectives use its namespace interface."""
        del node
        return {"GLOO_SOCKET_IFNAME": NODE_INTERFACE}

    def destroy(self) -> list[str]:
        """Remove what :meth:`create` made (idempotent); returns the problems."""
        problems = []
        for kind, name in reversed(self._created):
            done = _ip(kind, "del", name)
            if done.returncode != 0 and "Cannot find" not in done.stderr:
                problems.append(f"ip {kind} del {name}: {done.stderr.strip()}")
        self._created.clear()
        return problems
