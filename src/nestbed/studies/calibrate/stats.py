"""Repetitions into points: means with 95 % Student t intervals, and the knee (pure)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nestbed.results.intervals import t_interval
from nestbed.studies.validate import wilson

METRICS = (
    "loss_a_pct",
    "loss_b_pct",
    "loss_c_pct",
    "loss_total_pct",
    "owd_mean_us",
    "rtt_mean_us",
    "sender_pps",
)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float | None]:
    """The mean and the half-width of its Student t interval (None from one value)."""
    mean, _, low, high = t_interval(values, confidence)
    return mean, (None if math.isnan(low) else high - mean)


def _group(rows: Iterable[Mapping[str, Any]], keys: tuple[str, ...]) -> dict[tuple, list]:
    groups: dict[tuple, list] = defaultdict(list)
    for row in rows:
        groups[tuple(row[k] for k in keys)].append(row)
    return groups


def _number(value: Any) -> float:
    return math.nan if value in (None, "") else float(value)


def points(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (topology, profile, size, burst): every metric's mean and 95 % interval
    over repetitions. A repetition with several receivers counts once, as their mean, so the
    interval is over repetitions, not receivers."""
    per_rep = []
    for key, group in _group(rows, ("topology", "profile", "size", "burst", "rep")).items():
        row = dict(zip(("topology", "profile", "size", "burst", "rep"), key, strict=True))
        for m in METRICS:
            vals = [_number(r.get(m)) for r in group if not math.isnan(_number(r.get(m)))]
            row[m] = statistics.fmean(vals) if vals else math.nan
        per_rep.append(row)
    out = []
    for key, group in sorted(_group(per_rep, ("topology", "profile", "size", "burst")).items()):
        row: dict[str, Any] = dict(zip(("topology", "profile", "size", "burst"), key, strict=True))
        row["n"] = len(group)
        for m in METRICS:
            mean, half = mean_ci([r[m] for r in group])
            row[m] = mean
            row[f"{m}_ci95"] = half
        out.append(row)
    return out


def receivers(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per receiver and packet size (bursts and repetitions pooled): the paper's Figure 15."""
    out = []
    keys = ("topology", "profile", "receiver", "size")
    for key, group in sorted(_group(rows, keys).items()):
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row["n"] = len(group)
        for m in ("loss_b_pct", "loss_c_pct", "loss_total_pct"):
            mean, half = mean_ci([_number(r[m]) for r in group])
            row[m], row[f"{m}_ci95"] = mean, half
        out.append(row)
    return out


def knee(sizes_and_loss: Iterable[tuple[int, float]], threshold_pct: float) -> int | None:
    """The smallest packet size from which loss stays at or below the threshold for every
    larger size too (the paper's "losses taper down to zero beyond 250 bytes"); None when
    even the largest size loses more."""
    found = None
    for size, loss in sorted(sizes_and_loss, reverse=True):
        if math.isnan(loss) or loss > threshold_pct:
            break
        found = size
    return found


def knees(point_rows: Iterable[Mapping[str, Any]], threshold_pct: float) -> list[dict[str, Any]]:
    """The knee of end-to-end loss per (topology, profile, burst)."""
    out = []
    for key, group in sorted(_group(point_rows, ("topology", "profile", "burst")).items()):
        curve = [(int(r["size"]), float(r["loss_total_pct"])) for r in group]
        worst = max(curve, key=lambda c: c[1])
        out.append(
            {
                "topology": key[0],
                "profile": key[1],
                "burst": key[2],
                "threshold_pct": threshold_pct,
                "knee_size": knee(curve, threshold_pct),
                "worst_size": worst[0],
                "worst_loss_pct": worst[1],
            }
        )
    return out


def binomial_interval(k: int, n: int) -> tuple[float, float]:
    """The 99.9 % Wilson score interval of k/n, for checking a configured loss rate."""
    return wilson(k, n, z=3.2905)
