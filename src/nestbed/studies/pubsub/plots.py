"""Figures in the style of the paper's Figure 2 (formats), Figure 4 (formats × compressors) and
Figure 5 (loss scenarios); error bars are 95 % confidence intervals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from nestbed.errors import UserError

MS = 1e3


def _means_and_errors(frame: pd.DataFrame, metric: str, scale: float) -> tuple[Any, Any]:
    means = frame[f"{metric}_mean"].to_numpy() * scale
    low = frame[f"{metric}_low"].to_numpy() * scale
    high = frame[f"{metric}_high"].to_numpy() * scale
    # NaN intervals (a single repetition) draw no error bar rather than failing.
    return means, np.nan_to_num(np.vstack([means - low, high - means]))


def _bars(axes: Axes, frame: pd.DataFrame, metric: str, scale: float, x_labels: list[str]) -> None:
    means, errors = _means_and_errors(frame, metric, scale)
    axes.bar(x_labels, means, yerr=errors, capsize=3, color="0.6", edgecolor="black")
    axes.tick_params(axis="x", rotation=45)


def figure2(
    summary: pd.DataFrame, compressor: str = "none", delivery: pd.DataFrame | None = None
) -> Figure:
    """(A) efficiency, (B) serialization and (C) deserialization time of each format, and with
    `delivery` (a `study.summarize_delivery` frame) (D) its delivery time without loss."""
    frame = summary[summary["compressor"] == compressor]
    if frame.empty:
        raise UserError(f"figure 2 needs rows with compressor {compressor!r}")
    labels = list(frame["format"])
    panels = [
        ("efficiency", 1.0, "(A) serialization efficiency", "content / stream bytes"),
        ("serialize_s", MS, "(B) serialization time", "ms"),
        ("deserialize_s", MS, "(C) deserialization time", "ms"),
    ]
    lossless = _lossless(delivery, compressor)
    fig, axes = plt.subplots(1, 3 + (lossless is not None), figsize=(17, 4), layout="constrained")
    for ax, (metric, scale, title, unit) in zip(axes, panels, strict=False):
        _bars(ax, frame, metric, scale, labels)
        ax.set_title(title)
        ax.set_ylabel(unit)
    if lossless is not None:
        qos = lossless["qos"].iloc[0]
        _bars(axes[3], lossless.set_index("format").reindex(labels), "delivery_s", MS, labels)
        axes[3].set_title(f"(D) delivery (round-trip) time, {qos}")
        axes[3].set_ylabel("ms")
    return fig


def _lossless(delivery: pd.DataFrame | None, compressor: str) -> pd.DataFrame | None:
    """The delivery rows of the no-loss scenario (reliable QoS when measured) for `compressor`."""
    if delivery is None or delivery.empty:
        return None
    rows = delivery[(delivery["scenario"] == "none") & (delivery["compressor"] == compressor)]
    if rows.empty:
        return None
    qos = "reliable" if "reliable" in set(rows["qos"]) else rows["qos"].iloc[0]
    return rows[rows["qos"] == qos]


def figure4(summary: pd.DataFrame) -> Figure:
    """(A) local processing time, (B) compression time, (C) efficiency, grouped by compressor."""
    formats = list(dict.fromkeys(summary["format"]))
    compressors = list(dict.fromkeys(summary["compressor"]))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), layout="constrained")
    panels = [
        ("processing_s", MS, "(A) serialize+compress+decompress+deserialize", "ms"),
        ("compress_s", MS, "(B) compression time", "ms"),
        ("efficiency", 1.0, "(C) efficiency", "content / stream bytes"),
    ]
    width = 0.8 / len(compressors)
    x = np.arange(len(formats))
    for ax, (metric, scale, title, unit) in zip(axes, panels, strict=True):
        for i, compressor in enumerate(compressors):
            rows = summary[summary["compressor"] == compressor].set_index("format")
            rows = rows.reindex(formats)
            means, errors = _means_and_errors(rows, metric, scale)
            ax.bar(x + i * width, means, width, yerr=errors, capsize=2, label=compressor)
        ax.set_xticks(x + width * (len(compressors) - 1) / 2, formats, rotation=45)
        ax.set_title(title)
        ax.set_ylabel(unit)
    axes[0].legend(title="compressor")
    return fig


def figure5(delivery: pd.DataFrame, qos: str) -> Figure:
    """Per lossy scenario (rows): (A) latency of the delivered messages (serialize, compress,
    deliver, decompress, deserialize) and (B) lost messages, per format grouped by compressor."""
    rows = delivery[(delivery["qos"] == qos) & (delivery["scenario"] != "none")]
    scenarios = list(dict.fromkeys(rows["scenario"]))
    if not scenarios:
        raise UserError(f"figure 5 needs rows of a lossy scenario with QoS {qos!r}")
    formats = list(dict.fromkeys(rows["format"]))
    compressors = list(dict.fromkeys(rows["compressor"]))
    fig, axes = plt.subplots(
        len(scenarios), 2, figsize=(14, 4.2 * len(scenarios)), layout="constrained", squeeze=False
    )
    width = 0.8 / len(compressors)
    x = np.arange(len(formats))
    for line, scenario in zip(axes, scenarios, strict=True):
        here = rows[rows["scenario"] == scenario]
        for i, compressor in enumerate(compressors):
            frame = here[here["compressor"] == compressor].set_index("format").reindex(formats)
            means, errors = _means_and_errors(frame, "latency_s", MS)
            line[0].bar(x + i * width, means, width, yerr=errors, capsize=2, label=compressor)
            lost = frame["lost_fraction"].to_numpy(dtype=float) * 100
            line[1].bar(x + i * width, lost, width, label=compressor)
        for ax in line:
            ax.set_xticks(x + width * (len(compressors) - 1) / 2, formats, rotation=45)
        line[0].set_title(f"(A) performance, {scenario} loss ({qos})")
        line[0].set_ylabel("latency of delivered messages, ms")
        # With few survivors the t interval can reach below zero; a latency cannot.
        line[0].set_ylim(bottom=0)
        line[1].set_title(f"(B) resiliency, {scenario} loss ({qos})")
        line[1].set_ylabel("lost messages, %")
        line[1].set_ylim(0, 105)  # a share: the same scale in every panel, even with none lost
    axes[0][0].legend(title="compressor")
    return fig


def write_figures(
    summary: pd.DataFrame, directory: Path, delivery: pd.DataFrame | None = None
) -> list[Path]:
    """Write figure2.png and figure4.png into `directory`, and with `delivery` (a
    `study.summarize_delivery` frame) Figure 2's delivery panel and figure5.png (best effort,
    the QoS that loses messages) plus figure5-reliable.png when measured; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    made = [
        (directory / "figure2.png", figure2(summary, delivery=delivery)),
        (directory / "figure4.png", figure4(summary)),
    ]
    lossy = None if delivery is None or delivery.empty else delivery[delivery["scenario"] != "none"]
    if lossy is not None and not lossy.empty:
        for qos in dict.fromkeys(lossy["qos"]):
            name = "figure5.png" if qos == "best-effort" else f"figure5-{qos}.png"
            made.append((directory / name, figure5(delivery, qos)))
    for path, fig in made:
        try:
            fig.savefig(path, dpi=120)
        finally:
            plt.close(fig)
    return [path for path, _ in made]
