"""Packet captures of a run (--capture): one capture per node end of each link, started before
t0 and stopped at the end, so the TCP segment tables can be read from them."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Collection
from pathlib import Path

from nestbed.backend.base import Backend
from nestbed.backend.plan import Plan
from nestbed.results.folder import RunFolder

_SETTLE_S = 0.3  # tcpdump needs a moment after it starts before it captures
_STOP_WAIT_S = 5.0


class Captures:
    """The captures of the link ends of ``nodes`` (every node when empty)."""

    def __init__(
        self,
        backend: Backend,
        plan: Plan,
        folder: RunFolder,
        nodes: Collection[str],
        spawn: Callable[..., subprocess.Popen],
    ):
        self.backend, self.plan, self.folder = backend, plan, folder
        self.nodes, self.spawn = set(nodes), spawn
        self.processes: list[subprocess.Popen] = []

    def path(self, link: str, node: str) -> Path:
        return self.folder.pcaps / f"{link}-{node}.pcap"

    def start(self) -> None:
        self.folder.pcaps.mkdir(parents=True, exist_ok=True)
        for (link, node), ifname in sorted(self.plan.interfaces().items()):
            if self.nodes and node not in self.nodes:
                continue
            pcap = self.path(link, node)
            argv = self.backend.capture_argv(ifname, pcap)
            self.processes.append(self.spawn(node, argv, pcap.with_suffix(".log")))
        if self.processes:
            time.sleep(_SETTLE_S)

    def stop(self) -> None:
        """SIGINT, so each capture writes out what it buffered."""
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
        for process in self.processes:
            try:
                process.wait(_STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def of_node(self, node: str) -> list[Path]:
        """The capture files of the node's link ends that exist."""
        found = [self.path(link, n) for link, n in self.plan.interfaces() if n == node]
        return [p for p in found if p.is_file()]
