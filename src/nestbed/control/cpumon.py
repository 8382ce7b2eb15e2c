"""CPU-availability monitors of a run: nestbed-cpumon in chosen nodes (their namespace and
cgroup), one row per node and second in nodes/cpu.csv beside the node's cgroup CPU use."""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import subprocess
import threading
from collections.abc import Callable

from nestbed.backend.cgroups import NodeCgroup
from nestbed.results.tables import Table

# What nestbed.analysis.cpu reads (unix_s, available, node, interval_s, longest_gap_s,
# cpu_util, addresses), with the run's own clock first as in every other table.
CPU_COLUMNS = (
    "t_s",
    "node",
    "unix_s",
    "interval_s",
    "available",
    "longest_gap_s",
    "gaps",
    "looped_s",
    "run_fraction",
    "wait_fraction",
    "cpu_util",
    "addresses",
)
_STOP_WAIT_S = 5.0


class CpuMonitor:
    """One nestbed-cpumon in one node; its lines become rows of the shared table."""

    def __init__(
        self,
        node: str,
        addresses: list[str],
        cgroup: NodeCgroup | None,
        table: Table,
        now_s: Callable[[], float],
    ):
        self.node, self.addresses, self.cgroup = node, " ".join(addresses), cgroup
        self.table, self.now_s = table, now_s
        self.process: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None
        self.rows = 0

    def start(self, spawn: Callable[..., subprocess.Popen], binary: str, duty: float) -> None:
        # spawn puts it in the node's namespace and cgroup: it measures what the node's
        # programs get, quota and competing processes included.
        argv = [binary, "--interval", "1", "--duty", f"{duty:g}"]
        counter = self._open_counter()
        if counter is not None:
            # Read by the monitor at each interval's end (this reader may fall behind), through
            # the descriptor: `ip netns exec` gives the node a /sys without cgroups.
            argv += ["--cgroup-cpu", f"/proc/self/fd/{counter}"]
        try:
            self.process = spawn(
                self.node,
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=() if counter is None else (counter,),
            )
        finally:
            if counter is not None:
                os.close(counter)
        self.reader = threading.Thread(target=self._read, name=f"cpumon-{self.node}", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        lines = (line.decode(errors="replace") for line in self.process.stdout)
        before = self._cpu_seconds()  # the first interval starts about now
        for sample in csv.DictReader(lines):
            now = _number(sample.get("cgroup_cpu_s"))
            interval = _number(sample.get("interval_s"))
            util = None
            if before is not None and now is not None and interval:
                util = (now - before) / interval  # in cores, the monitor's own loop included
            before = now
            self.table.add({
                "t_s": round(self.now_s(), 3), "node": self.node,
                **{k: sample.get(k) for k in CPU_COLUMNS if k in sample and k != "t_s"},
                "cpu_util": util, "addresses": self.addresses,
            })  # fmt: skip
            self.rows += 1
        self.process.stdout.close()

    def _open_counter(self) -> int | None:
        if self.cgroup is None:
            return None
        try:
            return os.open(self.cgroup.cpu_counter, os.O_RDONLY)
        except OSError:
            return None

    def _cpu_seconds(self) -> float | None:
        if self.cgroup is None:
            return None
        try:
            return self.cgroup.cpu_seconds()
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """SIGINT (it prints the interval cut short), then waits for its last row."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.reader is not None:
            self.reader.join(_STOP_WAIT_S)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None
