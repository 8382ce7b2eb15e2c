"""Plots of an analysis: throughput per transfer, RTT and packet-spacing CDFs, advertised
window, and CPU availability per node (matplotlib's Agg canvas, as results/report.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MAX_LINES = 12  # transfers per plot: the busiest
MAX_POINTS = 2000  # points per CDF line


def _label(t: dict[str, Any]) -> str:
    return f"#{t['transfer']} {t['src']}:{t['sport']}→{t['dst']}:{t['dport']} ({t['verdict']})"


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An empirical CDF thinned to MAX_POINTS quantiles (its shape, not every sample)."""
    v = np.sort(values)
    y = np.arange(1, v.size + 1) / v.size
    if v.size > MAX_POINTS:
        keep = np.unique(np.linspace(0, v.size - 1, MAX_POINTS).astype(int))
        v, y = v[keep], y[keep]
    return v, y


class _Data:
    """The tables of one analysis, read once."""

    def __init__(self, folder: Path, transfers: list[dict[str, Any]], cpu: pd.DataFrame | None):
        self.transfers = sorted(transfers, key=lambda t: -t["bytes"])[:MAX_LINES]
        self.t0 = min((t["start_unix_s"] for t in transfers), default=0.0)
        self.cpu = cpu
        self.tables = {
            n: pd.read_csv(folder / f"{n}.csv") for n in ("series", "rtt", "spacing", "window")
        }

    def rows(self, name: str, t: dict[str, Any]) -> pd.DataFrame:
        table = self.tables[name]
        return table[table["transfer"] == t["transfer"]]

    def x(self, t: dict[str, Any], rows: pd.DataFrame) -> pd.Series:
        return rows["t_s"] + (t["start_unix_s"] - self.t0)


def _throughput(d: _Data, fig: Figure, bin_s: float) -> bool:
    ax = fig.subplots()
    for t in d.transfers:
        rows = d.rows("series", t)
        if not rows.empty:
            ax.step(d.x(t, rows), rows["bytes"] * 8 / bin_s / 1e6, where="post", label=_label(t))
    ax.set(xlabel="time since the first transfer began (s)", ylabel="throughput (Mb/s)")
    return bool(ax.lines)


def _distribution(column: str, xlabel: str, log: bool) -> Callable[[_Data, Figure, float], bool]:
    def draw(d: _Data, fig: Figure, _: float) -> bool:
        ax = fig.subplots()
        for t in d.transfers:
            v = d.rows(column, t)[f"{column}_s"].to_numpy(dtype=float)
            v = v[v > 0] if log else v
            if v.size:
                x, y = _cdf(v * 1e3)
                ax.step(x, y, where="post", label=_label(t))
        if log and ax.lines:
            ax.set_xscale("log")
        ax.set(xlabel=xlabel, ylabel="CDF", ylim=(0, 1))
        return bool(ax.lines)

    return draw


def _window(d: _Data, fig: Figure, _: float) -> bool:
    ax = fig.subplots()
    for t in d.transfers:
        rows = d.rows("window", t)
        if not rows.empty:
            ax.step(d.x(t, rows), rows["rwnd_bytes"] / 1e3, where="post", label=_label(t))
    ax.set(xlabel="time since the first transfer began (s)", ylabel="advertised window (kB)")
    return bool(ax.lines)


def _cpu(d: _Data, fig: Figure, _: float) -> bool:
    ax = fig.subplots()
    if d.cpu is None:
        return False
    for node, rows in d.cpu.sort_values("unix_s").groupby("node", sort=True):
        ax.plot(rows["unix_s"] - d.t0, rows["available"], marker=".", label=str(node))
    ax.set(xlabel="time since the first transfer began (s)", ylabel="CPU availability",
           ylim=(0, 1.05))  # fmt: skip
    return bool(ax.lines)


PLOTS: list[tuple[str, str, Callable[[_Data, Figure, float], bool]]] = [
    ("throughput.png", "Throughput per transfer", _throughput),
    ("rtt_cdf.png", "CDF of RTT", _distribution("rtt", "RTT (ms)", log=False)),
    ("spacing_cdf.png", "CDF of packet spacing at the sender",
     _distribution("spacing", "packet spacing (ms, log scale)", log=True)),
    ("window.png", "Advertised window", _window),
    ("cpu.png", "CPU availability per node", _cpu),
]  # fmt: skip


def draw(
    folder: Path,
    transfers: list[dict[str, Any]],
    cpu: pd.DataFrame | None,
    bin_s: float,
    into: Path | None = None,
) -> list[tuple[str, str]]:
    """Draws folder/plots/*.png (or ``into``/plots/*.png: a study's chosen transfers of an
    analysis in ``folder``) that have data; returns (file, caption) of each drawn."""
    d = _Data(folder, transfers, cpu)
    made = []
    for name, caption, plot in PLOTS:
        fig = Figure(figsize=(9, 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        path = (into or folder) / "plots" / name
        if plot(d, fig, bin_s):
            fig.axes[0].legend(loc="best", fontsize="x-small")
            path.parent.mkdir(exist_ok=True)
            fig.savefig(path, dpi=100)
            made.append((f"plots/{name}", caption))
        else:
            path.unlink(missing_ok=True)
    return made
