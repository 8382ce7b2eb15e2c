"""Nodes' CPU time and memory on other hosts, seen from the controlling machine as node
cgroups (``RemoteCgroup``), so that the controller's node table, its CPU monitor and the
server's idle check read them as on one host.

Each read is answered from the host's last reading of all its nodes of the experiment,
taken in one Dask task per host (``agent.node_usage``) and kept ``FRESH_S``: a sweep over
every node costs a task per host, not per node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from nestbed.backend.cgroups import NodeCgroup
from nestbed.errors import InternalError

FRESH_S = 0.05  # a host's reading answers reads this long
# Reads a host's nodes: host -> {node: (cpu_s, memory_bytes)}, or raises.
ReadHost = Callable[[str], dict[str, tuple[float, int]]]


class UsageReader:
    """The last reading of every host's nodes of one experiment."""

    def __init__(self, read_host: ReadHost):
        self.read_host = read_host
        self.lock = threading.Lock()
        self.readings: dict[str, tuple[float, dict[str, tuple[float, int]]]] = {}

    def read(self, host: str, node: str) -> tuple[float, int] | None:
        """The node's CPU seconds and memory bytes (None: it has no cgroup); OSError when
        its host cannot be asked."""
        with self.lock:
            at, nodes = self.readings.get(host, (-FRESH_S, {}))
            if time.monotonic() - at >= FRESH_S:
                try:
                    nodes = self.read_host(host)
                except Exception as exc:  # the host's own error, or Dask's
                    raise OSError(f"host {host} did not report its nodes' usage: {exc}") from exc
                self.readings[host] = (time.monotonic(), nodes)
        return nodes.get(node)


class RemoteCgroup(NodeCgroup):
    """A node's cgroup on another host: its counters only, read through its host's agent."""

    def __init__(self, reader: UsageReader, host: str, node: str):
        super().__init__(node, 2, {})
        self.reader, self.host, self.node = reader, host, node

    @property
    def cpu_counter(self) -> Path:
        raise OSError(f"node {self.node}'s CPU counter is on host {self.host}")

    def _read(self) -> tuple[float, int]:
        found = self.reader.read(self.host, self.node)
        if found is None:
            raise OSError(f"node {self.node} has no cgroup on host {self.host}")
        return found

    def cpu_seconds(self) -> float:
        return self._read()[0]

    def memory_bytes(self) -> int:
        return self._read()[1]

    def entered(self, argv: list[str]) -> list[str]:
        raise InternalError("a remote node's cgroup is entered on its host (start_in)")

    def add(self, pid: int) -> None:
        raise InternalError("a remote node's cgroup takes processes on its host")

    def pids(self) -> list[int]:
        raise InternalError("a remote node's processes are listed on its host")

    def kill(self) -> None:
        raise InternalError("a remote node's processes are ended on its host (swap-out)")
