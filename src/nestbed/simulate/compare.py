"""`nestbed compare`: run folders side by side (simulated and emulated, or any runs of one
experiment): per-flow throughput, delay and loss with their differences from the first run,
the flows' time series overlaid, and the differences beyond a tolerance flagged."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nestbed.errors import UserError
from nestbed.results import markdown
from nestbed.results.folder import RunFolder, make_folder
from nestbed.results.report import human, number
from nestbed.results.seqplot import SeqTrace, describe_recoveries, plot_sequence, read_tcp_table

# metric -> (how a difference is judged, unit kind for `human`, name in sentences)
METRICS: dict[str, tuple[str, str, str]] = {
    "throughput_bps": ("relative", "rate", "throughput"),
    "delay_mean_ms": ("relative", "ms", "mean one-way delay"),
    "loss": ("absolute", "percent", "loss"),
}
SERIES = [("throughput_bps", 1e6, "throughput (Mb/s)"),
          ("delay_mean_ms", 1.0, "one-way delay, mean per second (ms)")]  # fmt: skip
MAX_FLOWS_PLOTTED = 12


@dataclass
class Run:
    """One run folder as compare reads it."""

    folder: Path
    label: str
    manifest: dict[str, Any]
    flows: pd.DataFrame
    series: dict[str, pd.DataFrame] = field(default_factory=dict)
    tcp: dict[str, SeqTrace] = field(default_factory=dict)  # tcp/FLOW.csv by flow

    @property
    def backend(self) -> str:
        options = self.manifest.get("options") or {}
        return str(options.get("backend") or "emulation")

    def describe(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "label": self.label,
            "path": str(self.folder),
            "experiment": m.get("experiment"),
            "backend": self.backend,
            "outcome": m.get("outcome"),
            "started_at": m.get("started_at"),
        }


def _read_csv(path: Path, dtype: type | None = None) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=dtype, keep_default_na=dtype is None)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()
    except (ValueError, OSError) as exc:
        raise UserError(f"{path} cannot be read ({str(exc).splitlines()[0]})") from None


def load_run(folder: Path, label: str) -> Run:
    """A run folder's manifest, traffic/flows.csv and per-flow series."""
    if not folder.is_dir():
        raise UserError(f"{folder} is not a run folder; give the results folder of a run")
    paths = RunFolder(folder)
    try:
        manifest = json.loads(paths.manifest.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{folder} has no {paths.relative(paths.manifest)}, so it is not a run folder"
        ) from None
    except ValueError as exc:
        raise UserError(f"{paths.manifest} is not JSON ({exc})") from None
    if not paths.flows.is_file():
        raise UserError(
            f"{folder} has no {paths.relative(paths.flows)}; the run measured no traffic"
        )
    flows = _read_csv(paths.flows, dtype=str)  # numbers are converted where they are used
    run = Run(folder, label, manifest if isinstance(manifest, dict) else {}, flows)
    for path in sorted(paths.traffic.glob("*.csv")):
        if path != paths.flows:
            run.series[path.stem] = _read_csv(path)
    for path in sorted(paths.tcp.glob("*.csv")):
        run.tcp[path.stem] = read_tcp_table(path, f"{path.stem}, {label} ({run.backend})")
    return run


def _labels(runs: list[Path]) -> list[str]:
    """Each run's folder name, made unique with its position when two share a name."""
    names = [p.resolve().name or str(p) for p in runs]
    return [n if names.count(n) == 1 else f"{i + 1}:{n}" for i, n in enumerate(names)]


def _difference(
    base: float | None, other: float | None, how: str, tolerance: float
) -> dict[str, Any] | None:
    """The difference of OTHER from BASE, and whether it is beyond the tolerance: relative
    to BASE for throughput and delay, in absolute probability for loss."""
    if base is None or other is None:
        return None
    absolute = other - base
    relative = absolute / abs(base) if base else (0.0 if other == base else None)
    if how == "relative":
        beyond = relative is None or abs(relative) > tolerance
    else:
        beyond = abs(absolute) > tolerance
    return {"absolute": absolute, "relative": relative, "beyond": beyond}


def compare(
    runs: list[Path], *, tolerance: float = 0.02, output: Path | None = None
) -> dict[str, Any]:
    """Compares the run folders RUNS (at least two) flow by flow, each against the first.

    For every flow in any run: throughput (b/s), mean one-way delay (ms) and loss, each run's
    value, and each later run's absolute and relative difference from the first. A difference
    is *beyond* the tolerance when ``|relative| > tolerance`` for throughput and delay, and
    when ``|absolute| > tolerance`` for loss (a probability: 0.02 is two percentage points).
    A flow missing from some run is listed under ``missing`` and counts as a difference.

    With ``output`` (a folder, created), writes ``compare.json`` (the returned structure),
    ``compare.md`` (the table) and ``plots/throughput.png``, ``plots/delay.png`` (each flow's
    time series, one line per run).

    Returns a JSON-able dict: ``tolerance``, ``baseline`` (label of the first run), ``runs``
    (label, path, experiment, backend, outcome, started_at), ``flows`` (flow, kind, path, and
    per metric: ``values`` by run label and ``differences`` by later run label), ``missing``,
    ``differences`` (one sentence per difference beyond the tolerance), ``agree`` (no such
    difference), ``table`` (``columns`` and ``rows`` of plain strings, ready to print) and
    ``files`` (what was written).
    """
    if len(runs) < 2:
        raise UserError("compare needs at least two run folders")
    if not tolerance >= 0:
        raise UserError(
            f"tolerance {tolerance} is not a non-negative fraction; give one such as 0.02"
        )
    loaded = [load_run(Path(p), label) for p, label in zip(runs, _labels(runs), strict=True)]
    base, others = loaded[0], loaded[1:]
    by_run = [{str(r["flow"]): r for r in run.flows.to_dict("records")} for run in loaded]
    names = list(dict.fromkeys(name for flows in by_run for name in flows))
    flows, missing, sentences = [], [], []
    for name in names:
        rows = [flows.get(name) for flows in by_run]
        known = next(r for r in rows if r is not None)
        absent = [run.label for run, r in zip(loaded, rows, strict=True) if r is None]
        if absent:
            missing.append({"flow": name, "runs": absent})
            sentences.append(f"{name}: missing from {', '.join(absent)}")
        entry: dict[str, Any] = {
            "flow": name,
            "kind": known.get("kind") or None,
            "path": f"{known.get('source') or '?'}→{known.get('destination') or '?'}",
            "metrics": {},
        }
        for metric, (how, _, words) in METRICS.items():
            values = [number(r.get(metric)) if r is not None else None for r in rows]
            if all(v is None for v in values):
                continue  # not measured for this kind of flow (delay of FTP)
            diffs = {}
            for run, value in zip(others, values[1:], strict=True):
                d = _difference(values[0], value, how, tolerance)
                diffs[run.label] = d
                if d is not None and d["beyond"]:
                    sentences.append(_sentence(name, words, run.label, base.label, d, how))
            entry["metrics"][metric] = {
                "values": {run.label: v for run, v in zip(loaded, values, strict=True)},
                "differences": diffs,
            }
        flows.append(entry)
    result: dict[str, Any] = {
        "tolerance": tolerance,
        "baseline": base.label,
        "runs": [run.describe() for run in loaded],
        "flows": flows,
        "missing": missing,
        "differences": sentences,
        "agree": not sentences,
        "table": table(flows, loaded),
        "tcp": tcp_recovery(loaded),
        "files": {},
    }
    if output is not None:
        result["files"] = _write(Path(output), result, loaded)
    return result


def tcp_recovery(runs: list[Run]) -> list[dict[str, Any]]:
    """For every flow with a TCP segment table in some run: each run's drops and how the
    sender recovered from each (``SeqTrace.recoveries``), with a sentence per run, and whether
    every drop in every run that has the table was recovered by fast retransmit."""
    out = []
    for name in dict.fromkeys(n for r in runs for n in r.tcp):
        per_run = {}
        for run in runs:
            if name in run.tcp:
                recoveries = run.tcp[name].recoveries()
                per_run[run.label] = {
                    "unit": run.tcp[name].unit,
                    "recoveries": recoveries,
                    "summary": describe_recoveries(recoveries),
                }
        drops = [r for v in per_run.values() for r in v["recoveries"]]
        out.append({
            "flow": name,
            "runs": per_run,
            "all_fast_retransmit": bool(drops)
            and all(r["recovery"] == "fast retransmit" for r in drops),
        })  # fmt: skip
    return out


def _sentence(flow: str, words: str, run: str, base: str, d: dict[str, Any], how: str) -> str:
    if how == "relative" and d["relative"] is not None:
        by = f"{d['relative'] * 100:+.1f} %"
    elif how == "relative":
        by = "from zero"
    else:
        by = f"{d['absolute'] * 100:+.2f} percentage points"
    return f"{flow}: {words} of {run} differs from {base} by {by}"


def table(flows: list[dict[str, Any]], runs: list[Run]) -> dict[str, list[Any]]:
    """Rows of plain text: flow, metric, each run's value, then Δ and Δ% of each later run."""
    labels = [r.label for r in runs]
    columns = ["flow", "metric", *labels]
    for label in labels[1:]:
        columns += [f"Δ {label}", f"Δ% {label}"]
    columns.append("beyond tolerance")
    rows = []
    for f in flows:
        for metric, data in f["metrics"].items():
            _, kind, words = METRICS[metric]
            row = [f["flow"], words, *(human(data["values"][x], kind) for x in labels)]
            beyond = []
            for label in labels[1:]:
                d = data["differences"].get(label)
                if d is None:
                    row += ["—", "—"]
                    continue
                row.append(human(d["absolute"], kind))
                row.append("—" if d["relative"] is None else f"{d['relative'] * 100:+.1f} %")
                if d["beyond"]:
                    beyond.append(label)
            row.append(", ".join(beyond) or "no")
            rows.append(row)
    return {"columns": columns, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    """The comparison as plain monospaced text (for terminals without rich)."""
    t = result["table"]
    if not t["rows"]:
        return "no traffic flows in these runs to compare (programs are not compared)"
    cells = [t["columns"], *t["rows"]]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(t["columns"]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    for sentence in result["differences"]:
        lines.append(f"! {sentence}")
    for flow in result.get("tcp", []):
        for label, data in flow["runs"].items():
            lines.append(f"{flow['flow']} in {label}: {data['summary']}")
    return "\n".join(lines)


def _markdown(result: dict[str, Any], plots: list[str]) -> str:
    t = result["table"]
    lines = [f"# Comparison of {len(result['runs'])} runs", ""]
    lines += [f"- {r['label']}: {r['experiment']}, {r['backend']}, {r['outcome']} (`{r['path']}`)"
              for r in result["runs"]]  # fmt: skip
    lines += ["", f"Tolerance: {result['tolerance']:g} (relative for throughput and delay, "
              "absolute for loss); differences are from the first run.", ""]  # fmt: skip
    lines += markdown.table(t["columns"], t["rows"])
    lines += ["", "## Beyond the tolerance", ""]
    lines += [f"- {s}" for s in result["differences"]] or ["None."]
    if result.get("tcp"):
        lines += ["", "## TCP recovery", ""]
        for flow in result["tcp"]:
            for label, data in flow["runs"].items():
                lines.append(f"- {flow['flow']} in {label}: {data['summary']}")
                for r in data["recoveries"]:
                    dups = f"{r['duplicate_acks']} duplicate ACK{'s' * (r['duplicate_acks'] != 1)}"
                    lines.append(f"  - {data['unit']} {r['seq']:g} dropped at "
                                 f"{r['dropped_s']:.3f} s, {dups}, {r['recovery']}")  # fmt: skip
    if plots:
        lines += ["", "## Plots", "", *(f"![{p}]({p})" for p in plots)]
    return "\n".join(lines) + "\n"


def _plot(runs: list[Run], column: str, scale: float, ylabel: str, path: Path) -> bool:
    """Each flow's series in its own panel, one line per run; False when nothing to draw."""
    names = list(dict.fromkeys(n for r in runs for n in r.series))
    drawn = []
    for name in names:
        lines = []
        for run in runs:
            s = run.series.get(name)
            if s is None or "t_s" not in s or s.empty:
                continue
            y = pd.to_numeric(s.get(column), errors="coerce") if column in s else None
            if column == "throughput_bps" and (y is None or y.isna().all()) and "bytes" in s:
                y = pd.to_numeric(s["bytes"], errors="coerce") * 8  # 1-s bins
            if y is None or y.isna().all():
                continue
            t = pd.to_numeric(s["t_s"], errors="coerce")
            keep = t.notna() & y.notna()
            lines.append((run.label, t[keep].to_numpy(), y[keep].to_numpy() / scale))
        if lines:
            drawn.append((name, lines))
    if not drawn:
        return False
    drawn = drawn[:MAX_FLOWS_PLOTTED]
    fig = Figure(figsize=(9, 2.6 * len(drawn) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(drawn), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, lines) in zip(axes, drawn, strict=True):
        for label, t, y in lines:
            order = np.argsort(t, kind="stable")
            ax.step(t[order], y[order], where="post", label=label)
        ax.set(title=name, ylabel=ylabel)
        ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("time since start (s)")
    if len(names) > MAX_FLOWS_PLOTTED:
        fig.suptitle(f"the first {MAX_FLOWS_PLOTTED} of {len(names)} flows", fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return True


def _write(output: Path, result: dict[str, Any], runs: list[Run]) -> dict[str, Any]:
    make_folder(output)
    plots = []
    for column, scale, ylabel in SERIES:
        name = f"plots/{column.split('_')[0]}.png"
        if _plot(runs, column, scale, ylabel, output / name):
            plots.append(name)
        else:
            (output / name).unlink(missing_ok=True)
    for name in dict.fromkeys(n for r in runs for n in r.tcp):
        plot = f"plots/tcp-{name}.png"
        plot_sequence([r.tcp[name] for r in runs if name in r.tcp], output / plot,
                      title=f"{name}: sequence numbers over time")  # fmt: skip
        plots.append(plot)
    files = {
        "json": str(output / "compare.json"),
        "markdown": str(output / "compare.md"),
        "plots": [str(output / p) for p in plots],
    }
    (output / "compare.md").write_text(_markdown(result, plots))
    (output / "compare.json").write_text(json.dumps({**result, "files": files}, indent=2) + "\n")
    return files
