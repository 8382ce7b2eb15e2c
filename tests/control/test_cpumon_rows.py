"""nodes/cpu.csv's cpu_util comes from the cgroup counter the monitor read at each interval's
end, so a controller that reads the monitor's lines late still divides each interval's CPU use
by its own length."""

from __future__ import annotations

import io
from types import SimpleNamespace

from nestbed.control.cpumon import CpuMonitor

HEADER = "t_s,unix_s,interval_s,available,longest_gap_s,gaps,looped_s,run_fraction,wait_fraction,cgroup_cpu_s\n"


class Rows(list):
    def add(self, row: dict) -> None:
        self.append(row)


def test_lines_read_together_keep_each_intervals_own_cpu_use():
    # The cgroup read 10.0 s when the reader started; the monitor then read 10.5 s and 10.6 s
    # at its intervals' ends. The reader got both lines at once, long after, when the counter
    # already said 11.0: that later reading must not be used.
    lines = HEADER + "1.0,0,1.0,1,0,0,1,1,0,10.5\n" + "2.0,0,0.5,1,0,0,1,1,0,10.6\n"
    cgroup = SimpleNamespace(cpu_seconds=iter([10.0, 11.0, 11.0]).__next__)
    rows = Rows()
    monitor = CpuMonitor("a", ["10.0.0.1"], cgroup, rows, lambda: 0.0)  # type: ignore[arg-type]
    monitor.process = SimpleNamespace(stdout=io.BytesIO(lines.encode()))  # type: ignore[assignment]
    monitor._read()
    assert [round(r["cpu_util"], 6) for r in rows] == [0.5, 0.2]
    assert [r["addresses"] for r in rows] == ["10.0.0.1", "10.0.0.1"]
