"""Figures in the style of the paper's Figure 2 (formats) and Figure 4 (formats × compressors).

Both read the frame `metrics.measure` returns; error bars are its 95 % confidence intervals.
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


def figure2(summary: pd.DataFrame, compressor: str = "none") -> Figure:
    """(A) efficiency, (B) serialization and (C) deserialization time of each format."""
    frame = summary[summary["compressor"] == compressor]
    if frame.empty:
        raise UserError(f"figure 2 needs rows with compressor {compressor!r}")
    labels = list(frame["format"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), layout="constrained")
    panels = [
        ("efficiency", 1.0, "(A) serialization efficiency", "content / stream bytes"),
        ("serialize_s", MS, "(B) serialization time", "ms"),
        ("deserialize_s", MS, "(C) deserialization time", "ms"),
    ]
    for ax, (metric, scale, title, unit) in zip(axes, panels, strict=True):
        _bars(ax, frame, metric, scale, labels)
        ax.set_title(title)
        ax.set_ylabel(unit)
    return fig


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


def write_figures(summary: pd.DataFrame, directory: Path) -> tuple[Path, Path]:
    """Write figure2.png and figure4.png into `directory`; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / "figure2.png", directory / "figure4.png")
    for fig, path in zip((figure2(summary), figure4(summary)), paths, strict=True):
        try:
            fig.savefig(path, dpi=120)
        finally:
            plt.close(fig)
    return paths
