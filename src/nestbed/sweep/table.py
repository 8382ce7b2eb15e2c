"""A sweep's results across points: one table (CSV and Parquet, a row per point × repetition),
summary statistics with confidence intervals per setting, and plots of a metric against one
parameter (lines with error bars) or two (a heat map)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nestbed.errors import UserError
from nestbed.results.intervals import CONFIDENCE, t_interval

PARAM = "param."


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return table.sort_values(["index", "repetition"], kind="stable").reset_index(drop=True)


def parameters(table: pd.DataFrame) -> list[str]:
    return [c.removeprefix(PARAM) for c in table.columns if c.startswith(PARAM)]


def metric_columns(table: pd.DataFrame) -> list[str]:
    """Numeric columns that come from the runs (not the bookkeeping)."""
    skip = {"index", "repetition", "seconds"}
    return [
        c for c in table.columns
        if not c.startswith(PARAM) and c not in skip
        and pd.to_numeric(table[c], errors="coerce").notna().any()
    ]  # fmt: skip


def write_tables(rows: list[dict[str, Any]], folder: Path) -> pd.DataFrame:
    """table.csv and table.parquet (every row), summary.csv (per setting)."""
    table = frame(rows)
    table.to_csv(folder / "table.csv", index=False)
    # Parquet needs one type per column: numbers stay numbers, anything mixed becomes text.
    typed = table.copy()
    for c in typed.columns:
        numbers = pd.to_numeric(typed[c], errors="coerce")
        mixed = numbers.isna() & typed[c].notna()
        typed[c] = typed[c].astype("string") if mixed.any() else numbers
    typed.to_parquet(folder / "table.parquet", index=False)
    summarize(table).to_csv(folder / "summary.csv", index=False)
    return table


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting and metric: runs, completed runs, mean, standard deviation and the
    CONFIDENCE interval of the mean (Student's t over the repetitions)."""
    names = [PARAM + p for p in parameters(table)]
    rows = []
    if table.empty:
        return pd.DataFrame()
    for key, group in table.groupby(names or ["index"], sort=False, dropna=False):
        setting = dict(zip(names, key if isinstance(key, tuple) else (key,), strict=True))
        ok = group[group["outcome"].isin(["completed", "halted"])]
        for metric in metric_columns(table):
            values = pd.to_numeric(ok[metric], errors="coerce").dropna().to_numpy(dtype=float)
            mean, sd, low, high = t_interval(values, CONFIDENCE)
            rows.append({
                **setting, "metric": metric, "runs": len(group), "n": len(values),
                "mean": mean, "sd": sd, "ci_low": low, "ci_high": high,
            })  # fmt: skip
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, metric: str, x: str, y: str | None, path: Path) -> Path:
    """``metric`` against parameter ``x``: a line with CONFIDENCE error bars per value of the
    other parameters; with ``y`` a heat map of the mean over x × y."""
    known = parameters(table)
    for name in (x, y):
        if name is not None and name not in known:
            raise UserError(f"the sweep has no parameter {name}; it has {', '.join(known)}")
    if metric not in table.columns:
        choices = ", ".join(metric_columns(table)) or "none"
        raise UserError(f"the sweep's table has no metric {metric}; it has {choices}")
    summary = summarize(table)
    summary = summary[summary["metric"] == metric]
    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    if y is None:
        others = [PARAM + p for p in known if p != x]
        groups = summary.groupby(others, sort=False) if others else [("", summary)]
        for key, g in groups:
            g = g.assign(_x=_axis(g[PARAM + x])).sort_values("_x")
            err = (g["ci_high"] - g["mean"]).fillna(0)
            values = key if isinstance(key, tuple) else (key,)
            label = ", ".join(
                f"{o.removeprefix(PARAM)}={v}" for o, v in zip(others, values, strict=False)
            )
            ax.errorbar(g["_x"], g["mean"], yerr=err, marker="o", capsize=3, label=label or None)
        ax.set(xlabel=x, ylabel=metric)
        if others:
            ax.legend(fontsize="small")
    else:
        grid = summary.pivot_table(index=PARAM + y, columns=PARAM + x, values="mean")
        grid = grid.loc[sorted(grid.index, key=_order), sorted(grid.columns, key=_order)]
        image = ax.imshow(grid.to_numpy(dtype=float), origin="lower", aspect="auto")
        ax.set_xticks(range(len(grid.columns)), labels=list(grid.columns))
        ax.set_yticks(range(len(grid.index)), labels=list(grid.index))
        ax.set(xlabel=x, ylabel=y)
        fig.colorbar(image, ax=ax, label=f"{metric} (mean)")
    ax.set_title(f"{metric}, mean and {CONFIDENCE:.0%} CI over repetitions", fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def _axis(values: pd.Series) -> pd.Series:
    """Parameter values as numbers when they all are (with units: 10Mb, 20ms), else their
    positions in order of first appearance."""
    numbers = values.map(_number)
    if numbers.notna().all():
        return numbers
    order = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return values.map(order)


def _order(value: Any) -> tuple[int, float, str]:
    number = _number(value)
    return (0, number, "") if number is not None else (1, 0.0, str(value))


def _number(value: Any) -> float | None:
    from nestbed.units import UnitError, parse_bandwidth, parse_delay

    text = str(value)
    for parse in (float, parse_bandwidth, parse_delay):
        try:
            return float(parse(text))  # type: ignore[operator]
        except (ValueError, UnitError):
            continue
    return None
