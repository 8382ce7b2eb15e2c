"""CPU availability per node (from nestbed-cpumon), and what it says during a transfer.

The table is CSV with one row per node and interval: ``unix_s`` (end of the interval),
``available`` (fraction of the interval the monitor ran), and optionally ``node``,
``interval_s`` (default 1), ``longest_gap_s``, ``cpu_util`` (the node's CPU use from its
cgroup, in cores) and ``addresses`` (the node's IP addresses, space-separated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nestbed.errors import UserError

REQUIRED = ("unix_s", "available")


def read_cpu(path: Path) -> pd.DataFrame:
    """The availability table at ``path``, numbers parsed, a ``node`` column always present."""
    try:
        table = pd.read_csv(path)
    except FileNotFoundError as exc:
        raise UserError(f"the CPU availability table {path} does not exist") from exc
    except (ValueError, OSError) as exc:
        raise UserError(f"the CPU availability table {path} is unreadable: {exc}") from exc
    missing = [c for c in REQUIRED if c not in table]
    if missing:
        raise UserError(
            f"the CPU availability table {path} lacks the column(s) {', '.join(missing)}; "
            "it needs unix_s and available (as nestbed-cpumon prints them)"
        )
    if "node" not in table:
        table["node"] = path.stem
    table["node"] = table["node"].astype(str)
    for column in ("unix_s", "available", "interval_s", "longest_gap_s", "cpu_util"):
        if column in table:
            table[column] = pd.to_numeric(table[column], errors="coerce")
    if "interval_s" not in table:
        table["interval_s"] = 1.0
    return table.dropna(subset=["unix_s", "available"])


def node_of(
    table: pd.DataFrame, address: str, addresses: Mapping[str, Sequence[str]] | None
) -> str | None:
    """The node with IP ``address``: from ``addresses`` (node → IPs), the table's
    ``addresses`` column, or the table's only node."""
    for node, ips in (addresses or {}).items():
        if address in ips:
            return node
    if "addresses" in table:
        for node, ips in zip(table["node"], table["addresses"].fillna(""), strict=True):
            if address in str(ips).split():
                return str(node)
    nodes = table["node"].unique()
    return str(nodes[0]) if len(nodes) == 1 else None


def cpu_evidence(
    table: pd.DataFrame, node: str, start_unix_s: float, end_unix_s: float,
    idle: pd.DataFrame | None = None,
) -> dict[str, Any] | None:  # fmt: skip
    """Availability on ``node`` over [start, end]: min, mean, longest gap, mean cgroup CPU use,
    and the correlation of the sender's idle time per bin (``idle``: unix_s, idle_s) with
    unavailability (1 - available) in the interval holding each bin. None without rows."""
    rows = table[table["node"] == node]
    began = rows["unix_s"] - rows["interval_s"]
    rows = rows[(rows["unix_s"] >= start_unix_s) & (began <= end_unix_s)]
    if rows.empty:
        return None
    e: dict[str, Any] = {
        "node": node,
        "intervals": len(rows),
        "available_min": float(rows["available"].min()),
        "available_mean": float(rows["available"].mean()),
        "longest_gap_s": _max(rows, "longest_gap_s"),
        "cpu_util_mean": _mean(rows, "cpu_util"),
        "r_idle_unavailable": None,
    }
    if idle is not None and not idle.empty:
        e["r_idle_unavailable"] = _correlation(rows, idle)
    return e


def _max(rows: pd.DataFrame, column: str) -> float | None:
    return float(rows[column].max()) if column in rows and rows[column].notna().any() else None


def _mean(rows: pd.DataFrame, column: str) -> float | None:
    return float(rows[column].mean()) if column in rows and rows[column].notna().any() else None


def _correlation(rows: pd.DataFrame, idle: pd.DataFrame) -> float | None:
    """Pearson r of idle_s per bin against 1 - available of its interval; None when fewer
    than 3 bins match or either side does not vary."""
    ends = rows["unix_s"].to_numpy()
    starts = ends - rows["interval_s"].to_numpy()
    order = np.argsort(ends)
    ends, starts = ends[order], starts[order]
    unavailable = 1 - rows["available"].to_numpy()[order]
    t = idle["unix_s"].to_numpy()
    i = np.searchsorted(ends, t)
    inside = (i < len(ends)) & (starts[np.minimum(i, len(ends) - 1)] <= t)
    x = idle["idle_s"].to_numpy()[inside]
    y = unavailable[i[inside]]
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])
