"""The run folder's tables: CSV files written row by row, so a run that dies keeps its rows."""

from __future__ import annotations

import csv
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

EVENT_COLUMNS = (
    "index",
    "source",
    "planned_s",
    "actual_s",
    "error_ms",
    "object",
    "verb",
    "args",
    "outcome",
    "message",
)
PROGRAM_COLUMNS = (
    "program",
    "node",
    "command",
    "started_s",
    "ended_s",
    "exit_code",
    "expected_exit_code",
    "timed_out",
    "outcome",
    "stdout",
    "stderr",
)
FLOW_COLUMNS = (
    "flow",
    "kind",
    "source",
    "destination",
    "started_s",
    "ended_s",
    "packets_sent",
    "bytes_sent",
    "packets_received",
    "bytes_received",
    "loss",
    "throughput_bps",
    "delay_mean_ms",
    "delay_p50_ms",
    "delay_p99_ms",
    "retransmits",
    "outcome",
)
FLOW_SERIES_COLUMNS = ("t_s", "packets", "bytes", "throughput_bps", "delay_mean_ms", "retransmits")
LINK_COLUMNS = (
    "t_s",
    "link",
    "port",
    "direction",
    "packets_in",
    "bytes_in",
    "packets_out",
    "bytes_out",
    "drops_loss",
    "drops_queue",
    "drops_other",
    "queue_packets",
    "queue_bytes",
)
NODE_COLUMNS = ("t_s", "node", "cpu_s", "memory_bytes")


class Table:
    """A CSV file with a fixed header; every row is flushed as it is added (thread-safe)."""

    def __init__(self, path: Path, columns: Sequence[str]):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.columns = tuple(columns)
        self._lock = threading.Lock()
        self._file = path.open("w", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, self.columns, extrasaction="raise")
        self._writer.writeheader()
        self._file.flush()

    def add(self, row: Mapping[str, Any]) -> None:
        with self._lock:
            self._writer.writerow({k: _cell(v) for k, v in row.items()})
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def write_table(path: Path, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    table = Table(path, columns)
    for row in rows:
        table.add(row)
    table.close()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.9g}"
    return value
