"""Student t confidence intervals of a mean, the one computation behind every interval nestbed
reports (sweeps, studies, calibration)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


def t_interval(
    values: Iterable[Any], confidence: float = CONFIDENCE
) -> tuple[float, float, float, float]:
    """(mean, sample sd, low, high) of VALUES, numbers or not: what is not a number (None,
    NaN, text) is left out. NaN where too few values remain (none: all NaN; one: sd and the
    interval)."""
    numbers = np.array([_number(v) for v in values], dtype=float)
    numbers = numbers[~np.isnan(numbers)]
    if numbers.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(numbers.mean())
    if numbers.size == 1:
        return mean, math.nan, math.nan, math.nan
    sd = float(numbers.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, numbers.size - 1)) * sd / math.sqrt(numbers.size)
    return mean, sd, mean - half, mean + half


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
