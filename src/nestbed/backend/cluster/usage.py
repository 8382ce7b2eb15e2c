"""Nodes' CPU time and memory on other hosts, seen from the controlling machine as node
cgroups (``RemoteCgroup``), so that the controller's node table, its CPU monitor and the
server's idle check read them as on one host.

Each read is answered from the last reading of all the experiment's nodes, taken on every
host at once (``agent.node_usage``, one Dask task per host in one round) and kept
``FRESH_S``: a sweep over every node (the controller's start, each of the sampler's rows)
costs one round, not one per node. One round for all hosts, not one per host: a round
takes tens of milliseconds, so with rounds host by host a sweep outlived ``FRESH_S`` and
read each host again and again (25 rounds for 400 nodes on 4 hosts at a controller's start,
1 s of its swap-in).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from nestbed.backend.cgroups import NodeCgroup
from nestbed.errors import InternalError

FRESH_S = 0.05  # a reading answers reads this long
# Reads every host's nodes: host -> {node: (cpu_s, memory_bytes)}, or the exception the
# host's reading raised.
ReadHosts = Callable[[], dict[str, dict[str, tuple[float, int]] | BaseException]]


class UsageReader:
    """The last reading of every host's nodes of one experiment."""

    def __init__(self, read_hosts: ReadHosts):
        self.read_hosts = read_hosts
        self.lock = threading.Lock()
        self.at = -FRESH_S
        self.readings: dict[str, dict[str, tuple[float, int]] | BaseException] = {}

    def read(self, host: str, node: str) -> tuple[float, int] | None:
        """The node's CPU seconds and memory bytes (None: it has no cgroup); OSError when
        its host cannot be asked."""
        with self.lock:
            if time.monotonic() - self.at >= FRESH_S:
                try:
                    self.readings = self.read_hosts()
                except Exception as exc:  # Dask's own error
                    raise OSError(f"the hosts did not report their nodes' usage: {exc}") from exc
                self.at = time.monotonic()
            nodes = self.readings.get(host, {})
        if isinstance(nodes, BaseException):
            raise OSError(f"host {host} did not report its nodes' usage: {nodes}")
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
