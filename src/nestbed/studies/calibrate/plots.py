"""The calibration's plots (matplotlib's Agg canvas): loss at A, B and C against packet size
(the paper's Figures 3-4), loss over packet size × burst size (5-6), delay tuned against
untuned (7-8), and loss per receiver on the LAN (15)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

POINTS = (
    ("a", "A: sender app → sender interface"),
    ("b", "B: sender interface → receiver interface"),
    ("c", "C: receiver interface → receiver app"),
)
Rows = Sequence[Mapping[str, Any]]


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _err(value: Any) -> float:
    return (
        0.0
        if value in (None, "") or (isinstance(value, float) and math.isnan(value))
        else float(value)
    )


def _curve(rows: Rows, metric: str, **match: Any) -> tuple[list, list, list]:
    chosen = sorted(
        (r for r in rows if all(r[k] == v for k, v in match.items())), key=lambda r: r["size"]
    )
    return (
        [r["size"] for r in chosen],
        [_err(r[metric]) if r[metric] is not None else math.nan for r in chosen],
        [_err(r.get(f"{metric}_ci95")) for r in chosen],
    )


def loss_points(points: Rows, topology: str, profile: str, path: Path) -> Path:
    """Figures 3-4: loss % at each point against packet size, one line per burst size."""
    fig = Figure(figsize=(13, 4))
    bursts = sorted({r["burst"] for r in points})
    for i, (point, title) in enumerate(POINTS):
        ax = fig.add_subplot(1, 3, i + 1)
        for burst in bursts:
            x, y, e = _curve(
                points, f"loss_{point}_pct", topology=topology, profile=profile, burst=burst
            )
            if x:
                ax.errorbar(x, y, yerr=e, marker="o", capsize=3, label=f"burst {burst}")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("packet size (B of UDP payload)")
        ax.set_ylabel("loss %")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=8)
    fig.suptitle(f"{topology}, {profile}: loss at the three points (mean, 95 % t interval)")
    return _save(fig, path)


def heat_map(points: Rows, topology: str, profile: str, path: Path) -> Path:
    """Figures 5-6: end-to-end loss over packet size × burst size."""
    chosen = [r for r in points if r["topology"] == topology and r["profile"] == profile]
    sizes = sorted({r["size"] for r in chosen})
    bursts = sorted({r["burst"] for r in chosen})
    grid = np.full((len(bursts), len(sizes)), np.nan)
    for r in chosen:
        grid[bursts.index(r["burst"]), sizes.index(r["size"])] = _err(r["loss_total_pct"])
    fig = Figure(figsize=(8, 4))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis", vmin=0)
    ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
    ax.set_yticks(range(len(bursts)), [str(b) for b in bursts])
    for (i, j), value in np.ndenumerate(grid):
        if not math.isnan(value):
            ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=7, color="white")
    ax.set_xlabel("packet size (B)")
    ax.set_ylabel("burst size (packets)")
    ax.set_title(f"{topology}, {profile}: application-to-application loss %")
    fig.colorbar(image, ax=ax, label="loss %")
    return _save(fig, path)


def delay(points: Rows, topology: str, path: Path) -> Path:
    """Figures 7-8: one-way and round-trip delay against packet size, tuned and untuned, at
    the largest and the smallest burst size."""
    fig = Figure(figsize=(11, 4))
    chosen = [r for r in points if r["topology"] == topology]
    bursts = sorted({r["burst"] for r in chosen})
    wanted = [bursts[-1]] + ([bursts[0]] if len(bursts) > 1 else [])
    for i, (metric, title) in enumerate(
        (
            ("owd_mean_us", "one-way, application to application"),
            ("rtt_mean_us", "round trip (echo)"),
        )
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        for profile in sorted({r["profile"] for r in chosen}, reverse=True):
            for burst, style in zip(wanted, ("-", "--"), strict=False):
                x, y, e = _curve(chosen, metric, profile=profile, burst=burst)
                if x:
                    ax.errorbar(
                        x,
                        y,
                        yerr=e,
                        marker="o",
                        linestyle=style,
                        capsize=3,
                        label=f"{profile}, burst {burst}",
                    )
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("packet size (B)")
        ax.set_ylabel("mean delay (µs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{topology}: delay, tuned against untuned (mean, 95 % t interval)")
    return _save(fig, path)


def per_receiver(receivers: Rows, topology: str, profile: str, path: Path) -> Path:
    """Figure 15: each receiver's loss against packet size (bursts and repetitions pooled)."""
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    chosen = [r for r in receivers if r["topology"] == topology and r["profile"] == profile]
    names = sorted({r["receiver"] for r in chosen}, key=lambda n: (len(n), n))
    for name in names:
        x, y, e = _curve(chosen, "loss_total_pct", receiver=name)
        ax.errorbar(x, y, yerr=e, marker=".", capsize=2, label=name)
    ax.set_xlabel("packet size (B)")
    ax.set_ylabel("loss % (mean, 95 % t interval)")
    ax.set_title(f"{topology}, {profile}: loss per receiver")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def comparison(first: Rows, second: Rows, labels: tuple[str, str], path: Path) -> Path:
    """Two calibrations' end-to-end loss and one-way delay against packet size, per target,
    at the largest common burst size."""
    keys = sorted(
        {(r["topology"], r["profile"]) for r in first}
        & {(r["topology"], r["profile"]) for r in second}
    )
    bursts = sorted({r["burst"] for r in first} & {r["burst"] for r in second})
    fig = Figure(figsize=(11, 4))
    for i, (metric, title) in enumerate(
        (("loss_total_pct", "loss %"), ("owd_mean_us", "one-way delay (µs)"))
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        for rows, label, style in ((first, labels[0], "-"), (second, labels[1], "--")):
            for n, (topology, profile) in enumerate(keys):
                x, y, e = _curve(
                    rows,
                    metric,
                    topology=topology,
                    profile=profile,
                    burst=bursts[-1] if bursts else None,
                )
                if x:
                    ax.errorbar(
                        x,
                        y,
                        yerr=e,
                        marker="o",
                        linestyle=style,
                        color=f"C{n % 10}",  # one colour per target, both calibrations
                        capsize=3,
                        label=f"{label}: {topology}, {profile}",
                    )
        ax.set_xlabel("packet size (B)")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"burst {bursts[-1] if bursts else '?'}: {labels[0]} (solid) against {labels[1]} (dashed)"
    )
    return _save(fig, path)
