"""The report of one run: report.md and plots/*.png from whatever tables its folder holds.

A failed run may leave some tables, empty ones or none; the report then says what is missing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# The Agg canvas drawn on directly, without pyplot: no process-wide backend switch and no
# figure registry that would keep every plot alive in a long-running controller.
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nestbed.errors import UserError
from nestbed.results import markdown
from nestbed.results.folder import RunFolder, write_whole
from nestbed.results.seqplot import SeqTrace, describe_recoveries, plot_sequence, read_tcp_table

LINK_VERBS = {"up", "down", "bandwidth", "delay", "plr"}
MAX_EVENT_ROWS = 50
MAX_LINES = 12  # lines per plot
DASH = "—"
UNITS = {
    "rate": [(1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "kb/s"), (1, "b/s")],
    "bytes": [(1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B")],
    "ms": [(1e3, "s"), (1, "ms")],
    "s": [(1, "s")],
    "percent": [(0.01, "%")],  # a probability, printed in percent
}
LABEL = {"rotation": 90, "va": "top", "ha": "right", "fontsize": "x-small", "color": "grey"}


@dataclass
class _Run:
    folder: RunFolder
    manifest: dict[str, Any] = field(default_factory=dict)
    tables: dict[Path, pd.DataFrame] = field(default_factory=dict)  # by the table's path
    series: dict[str, pd.DataFrame] = field(default_factory=dict)  # traffic/<flow>.csv by flow
    absent: dict[str, str] = field(default_factory=dict)  # file -> why it gave no rows

    def name(self, path: Path) -> str:
        """A file as the report names it: its path in the run folder."""
        return self.folder.relative(path)

    def note(self, what: str, path: Path) -> str:
        name = self.name(path)
        return f"_No {what}: `{name}` {self.absent.get(name, 'has no rows')}._"


def _read(run: _Run, path: Path) -> pd.DataFrame:
    name = run.name(path)
    if not path.is_file():
        run.absent[name] = "is missing"
        return pd.DataFrame()
    try:
        # All text: empty cells stay NaN, and numbers are converted where they are used.
        table = pd.read_csv(path, dtype=str)
    except pd.errors.EmptyDataError:
        table = pd.DataFrame()
    except (ValueError, OSError) as exc:  # a ParserError or UnicodeDecodeError is a ValueError
        run.absent[name] = f"is unreadable ({str(exc).splitlines()[0]})"
        return pd.DataFrame()
    if table.empty:
        run.absent[name] = "has no rows"
    return table


def _load(root: Path) -> _Run:
    folder = RunFolder(root)
    run = _Run(folder)
    try:
        manifest = json.loads(folder.manifest.read_text())
        run.manifest = manifest if isinstance(manifest, dict) else {}
    except FileNotFoundError:
        run.absent[run.name(folder.manifest)] = "is missing"
    except (ValueError, OSError):
        run.absent[run.name(folder.manifest)] = "is unreadable"
    tables = (folder.events, folder.programs_table, folder.flows, folder.link_counters,
              folder.node_usage)  # fmt: skip
    run.tables = {path: _read(run, path) for path in tables}
    for path in sorted(folder.traffic.glob("*.csv")):
        if path != folder.flows:
            run.series[path.stem] = _read(run, path)
    return run


def _num(table: pd.DataFrame, column: str) -> pd.Series:
    if column not in table:
        return pd.Series(np.nan, index=table.index, dtype=float)
    return pd.to_numeric(table[column], errors="coerce")


def _text(table: pd.DataFrame, column: str) -> pd.Series:
    if column not in table:
        return pd.Series("", index=table.index, dtype=str)
    return table[column].fillna("").astype(str)


def number(x: Any) -> float | None:
    """A number for JSON; None where the table had none."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(v) else v


def human(x: Any, kind: str) -> str:
    """A cell in human units: `9.52 Mb/s`, `20.1 ms`, `0.5 %`, `1.5 MB`, `1,234`, `2.000 s`."""
    v = number(x)
    if v is None:
        return DASH
    if kind == "count":
        return f"{v:,.0f}"
    if kind == "time":
        return f"{v:.3f} s"
    scale, unit = next(((s, u) for s, u in UNITS[kind] if abs(v) >= s), UNITS[kind][-1])
    v /= scale
    # Three significant digits, and never an exponent.
    return f"{v:,.0f} {unit}" if abs(v) >= 999.5 else f"{v:.3g} {unit}"


def _markdown(table: pd.DataFrame, columns: list[tuple[str, str, str]]) -> list[str]:
    """A Markdown table of (header, column, kind) where kind "" is text shown as is."""
    rows = [[human(row.get(c), k) if k else str(row.get(c, "")) for _, c, k in columns]
            for row in table.fillna("").to_dict("records")]  # fmt: skip
    return markdown.table([h for h, _, _ in columns], rows)


def _static(events: pd.DataFrame) -> pd.DataFrame:
    return events[_text(events, "source") == "static"]


def _timing(events: pd.DataFrame) -> dict[str, float] | None:
    """p50/p99/max of |error_ms| of static events; dynamic ones have no planned time to miss."""
    errors = _num(_static(events), "error_ms").abs().dropna()
    if errors.empty:
        return None
    p50, p99 = np.percentile(errors, [50, 99])
    return {"count": len(errors), "p50": float(p50), "p99": float(p99), "max": float(errors.max())}


def _flows(r: _Run) -> pd.DataFrame:
    """traffic/flows.csv with a path column; missing text columns become empty text."""
    flows = r.tables[r.folder.flows]
    flows = flows.assign(**{c: _text(flows, c) for c in ("flow", "kind", "outcome")})
    return flows.assign(path=_text(flows, "source") + "→" + _text(flows, "destination"))


def summary(run: Path) -> dict[str, Any]:
    """Short figures for a terminal table: outcome, duration, per-flow rows (flow, kind,
    source→destination, throughput_bps, loss, delay_mean_ms), event timing error p50/p99/max in
    ms (of static events), programs ok/failed counts."""
    r = _load(run)
    m = r.manifest
    programs = _text(r.tables[r.folder.programs_table], "outcome")
    flows = [
        {**{k: f[k] for k in ("flow", "kind", "path")},
         **{k: number(f.get(k)) for k in ("throughput_bps", "loss", "delay_mean_ms")}}
        for f in _flows(r).to_dict("records")
    ]  # fmt: skip
    return {
        **{k: m.get(k) for k in ("experiment", "run_id", "outcome", "reason")},
        "duration_s": number(m.get("duration_s")),
        "flows": flows,
        "timing_ms": _timing(r.tables[r.folder.events]),
        # Killed at teardown or still running then is not a failure of the program itself.
        "programs": {
            "ok": int((programs == "ok").sum()),
            "failed": int(programs.isin(["failed", "timeout"]).sum()),
            "total": len(programs),
        },
    }


def _by_key(table: pd.DataFrame, keys: list[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """Groups of a sampled table, each in time order (as column _t), labelled by its keys."""
    keys = [k for k in keys if k in table]
    if table.empty or not keys:
        return
    ordered = table.assign(_t=_num(table, "t_s")).sort_values("_t", kind="stable")
    for key, group in ordered.groupby(keys, sort=True, dropna=False):
        yield " ".join(str(p) for p in (key if isinstance(key, tuple) else (key,))), group


def _per_second(group: pd.DataFrame, values: pd.Series) -> pd.Series:
    """Rate of a cumulative counter between samples; NaN where time did not advance."""
    dt = group["_t"].diff()
    return values.diff() / dt.where(dt > 0)


def _plot_series(r: _Run, fig: Figure, column: str, scale: float, ylabel: str) -> bool:
    ax = fig.subplots()
    flows = _busiest(iter(r.series.items()), "bytes", fig, "flows", r.name(r.folder.traffic) + "/")
    for flow, series in flows:
        s = series.assign(_t=_num(series, "t_s"), _y=_num(series, column) / scale)
        if column == "throughput_bps" and s["_y"].isna().all():
            s["_y"] = _num(series, "bytes") * 8 / scale  # 1-s bins: bytes × 8 is b/s
        s = s.dropna(subset=["_t", "_y"]).sort_values("_t")
        if not s.empty:
            ax.step(s["_t"], s["_y"], where="post", label=flow)
    ax.set(xlabel="time since start (s)", ylabel=ylabel)
    return bool(ax.lines)


def _plot_throughput(r: _Run, fig: Figure) -> bool:
    if not _plot_series(r, fig, "throughput_bps", 1e6, "throughput (Mb/s)"):
        return False
    ax = fig.axes[0]
    events = _static(r.tables[r.folder.events])
    events = events[_text(events, "verb").isin(LINK_VERBS)]
    names = _text(events, "object") + " " + _text(events, "verb") + " " + _text(events, "args")
    for t, name in zip(_num(events, "actual_s"), names, strict=True):
        if not np.isnan(t):
            ax.axvline(t, linestyle=":", color="grey")
            ax.text(t, 0.98, name.strip(), transform=ax.get_xaxis_transform(), **LABEL)
    return True


def _plot_delay(r: _Run, fig: Figure) -> bool:
    return _plot_series(r, fig, "delay_mean_ms", 1, "one-way delay, mean per second (ms)")


def _busiest(
    groups: Iterator[tuple[str, pd.DataFrame]], column: str, fig: Figure, what: str, table: str
) -> list[tuple[str, pd.DataFrame]]:
    """The MAX_LINES groups with the largest ``column`` (a cumulative counter), so a plot of a
    large experiment stays readable (and fast: a legend of hundreds of lines takes seconds);
    the figure says how many it leaves out."""
    everything = list(groups)
    if len(everything) <= MAX_LINES:
        return everything
    ranked = sorted(everything, key=lambda kv: -np.nan_to_num(_num(kv[1], column).max()))
    fig.suptitle(f"the {MAX_LINES} busiest of {len(everything)} {what}; all are in {table}",
                 fontsize="small")  # fmt: skip
    return sorted(ranked[:MAX_LINES], key=lambda kv: kv[0])


def _plot_links(r: _Run, fig: Figure) -> bool:
    rate_ax, drop_ax = fig.subplots(2, 1, sharex=True)
    table = r.folder.link_counters
    groups = _by_key(r.tables[table], ["link", "port", "direction"])
    for name, g in _busiest(groups, "bytes_out", fig, "link directions", r.name(table)):
        drops = sum(_num(g, c).fillna(0) for c in ("drops_loss", "drops_queue", "drops_other"))
        rate = _per_second(g, _num(g, "bytes_out")) * 8 / 1e6
        if rate.notna().any():
            rate_ax.plot(g["_t"], rate, label=name)
            drop_ax.plot(g["_t"], _per_second(g, drops), label=name)
    rate_ax.set(ylabel="delivered (Mb/s)")
    drop_ax.set(xlabel="time since start (s)", ylabel="drops per second")
    return bool(rate_ax.lines)


def _plot_events(r: _Run, fig: Figure) -> bool:
    errors = np.sort(_num(_static(r.tables[r.folder.events]), "error_ms").dropna().to_numpy())
    ax = fig.subplots()
    ax.step(errors, np.arange(1, errors.size + 1) / max(errors.size, 1), where="post")
    ax.set(xlabel="timing error of static events, actual − planned (ms)", ylabel="CDF", ylim=(0, 1))
    return errors.size > 0


def _plot_cpu(r: _Run, fig: Figure) -> bool:
    ax = fig.subplots()
    table = r.folder.node_usage
    groups = _by_key(r.tables[table], ["node"])
    for node, g in _busiest(groups, "cpu_s", fig, "nodes", r.name(table)):
        cores = _per_second(g, _num(g, "cpu_s"))
        if cores.notna().any():
            ax.plot(g["_t"], cores, label=node)
    ax.set(xlabel="time since start (s)", ylabel="CPU (cores)")
    return bool(ax.lines)


PLOTS: list[tuple[str, str, Callable[[_Run, Figure], bool]]] = [
    ("throughput.png", "Throughput per flow", _plot_throughput),
    ("delay.png", "One-way delay per CBR flow", _plot_delay),
    ("links.png", "Delivered rate and drops per link", _plot_links),
    ("events.png", "Event timing error", _plot_events),
    ("cpu.png", "CPU per node", _plot_cpu),
]


def _draw(r: _Run) -> list[str]:
    """Draws the plots that have data and removes stale ones, so plots/ matches report.md."""
    made = []
    for name, caption, draw in PLOTS:
        fig = Figure(figsize=(9, 6 if name == "links.png" else 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        path = r.folder.plots / name
        if draw(r, fig):
            if fig.axes[0].get_legend_handles_labels()[1]:  # one legend: subplots share lines
                fig.axes[0].legend(loc="best", fontsize="small")
            path.parent.mkdir(exist_ok=True)
            # Whole or not at all: the portal may be showing the run's plots meanwhile.
            write_whole(path, lambda tmp, fig=fig: fig.savefig(tmp, dpi=100, format="png"))
            made.append(f"![{caption}]({r.name(path)})")
        else:
            path.unlink(missing_ok=True)
    return made


def _header(r: _Run) -> list[str]:
    m = r.manifest
    title = f"# {m.get('experiment', '?')}, run {m.get('run_id', '?')}: {m.get('outcome', '?')}"
    lines = [title if m else "# Run report: outcome unknown", ""]
    if m:
        reason = f" ({m['reason']})" if m.get("reason") else ""
        lines += [f"- Outcome: {m.get('outcome', DASH)}{reason}"]
        lines += [f"- {k.title()}: {m.get(f'{k}_at') or DASH}" for k in ("started", "ended")]
        lines += [f"- Duration: {human(m.get('duration_s'), 's')}"]
    if r.absent:
        lines += ["- Missing or empty: " + ", ".join(f"`{n}` ({w})" for n, w in r.absent.items())]
    return lines


FLOWS = [("Flow", "flow", ""), ("Kind", "kind", ""), ("Path", "path", ""),
         ("Packets sent", "packets_sent", "count"),
         ("Packets received", "packets_received", "count"),
         ("Throughput", "throughput_bps", "rate"), ("Loss", "loss", "percent"),
         ("Delay mean", "delay_mean_ms", "ms"), ("Delay p50", "delay_p50_ms", "ms"),
         ("Delay p99", "delay_p99_ms", "ms"), ("Retransmits", "retransmits", "count"),
         ("Outcome", "outcome", "")]  # fmt: skip
EVENTS = [("#", "index", ""), ("Source", "source", ""), ("Planned", "planned_s", "time"),
          ("Actual", "actual_s", "time"), ("Error", "error_ms", "ms"), ("Event", "event", ""),
          ("Outcome", "outcome", ""), ("Message", "message", "")]  # fmt: skip
PROGRAMS = [("Program", "program", ""), ("Node", "node", ""), ("Command", "command", ""),
            ("Started", "started_s", "time"), ("Ended", "ended_s", "time"),
            ("Exit code", "exit_code", "count"), ("Expected", "expected_exit_code", "count"),
            ("Outcome", "outcome", ""), ("Output", "output", "")]  # fmt: skip
LINKS = [("Link", "link", ""), ("Port", "port", ""), ("Direction", "direction", ""),
         ("Packets out", "packets_out", "count"), ("Bytes out", "bytes_out", "bytes"),
         ("Drops (loss)", "drops_loss", "count"), ("Drops (queue)", "drops_queue", "count"),
         ("Drops (other)", "drops_other", "count"),
         ("Peak queue (packets)", "queue_packets", "count"),
         ("Peak queue (bytes)", "queue_bytes", "bytes")]  # fmt: skip


def _flow_section(r: _Run) -> list[str]:
    flows = _flows(r)
    return _markdown(flows, FLOWS) if len(flows) else [r.note("flows", r.folder.flows)]


def _event_section(r: _Run) -> list[str]:
    events = r.tables[r.folder.events]
    if events.empty:
        return [r.note("events", r.folder.events)]
    event = _text(events, "object") + " " + _text(events, "verb") + " " + _text(events, "args")
    lines = _markdown(events.assign(event=event.str.strip()).head(MAX_EVENT_ROWS), EVENTS)
    if len(events) > MAX_EVENT_ROWS:
        lines += [
            "",
            f"_The first {MAX_EVENT_ROWS} of {len(events)} events; all are in "
            f"`{r.name(r.folder.events)}`._",
        ]
    t = _timing(events)
    if t is None:
        return [*lines, "", "Timing error: no static event with a measured time."]
    p50, p99, most = (human(t[k], "ms") for k in ("p50", "p99", "max"))
    n = t["count"]
    return [*lines, "", f"Timing error of {n} static events (|actual − planned|): "
            f"p50 {p50}, p99 {p99}, max {most}."]  # fmt: skip


def _program_section(r: _Run) -> list[str]:
    programs = r.tables[r.folder.programs_table]
    if programs.empty:
        return [r.note("programs", r.folder.programs_table)]
    output = [" ".join(f"[{k}]({p[k]})" for k in ("stdout", "stderr") if p.get(k))
              for p in programs.fillna("").to_dict("records")]  # fmt: skip
    return _markdown(programs.assign(output=output), PROGRAMS)


def _link_section(r: _Run) -> list[str]:
    counters = r.tables[r.folder.link_counters]
    keys = [k for k in ("link", "port", "direction") if k in counters]
    if counters.empty or not keys:
        return [r.note("link counters", r.folder.link_counters)]
    # Counters are cumulative since the pipe was made, so a total is the largest sample.
    numbers = {c: _num(counters, c) for _, c, kind in LINKS if kind}
    totals = counters[keys].assign(**numbers).groupby(keys, sort=True, dropna=False).max()
    return _markdown(totals.reset_index(), LINKS)


def _tcp_traces(r: _Run) -> Iterator[tuple[str, SeqTrace]]:
    flows = {f: row for f, row in _by_key(_flows(r), ["flow"])}
    backend = (r.manifest.get("options") or {}).get("backend") or "emulated"
    for path in sorted(r.folder.tcp.glob("*.csv")):
        row = flows.get(path.stem)
        where = ""
        if row is not None:
            where = f" ({_text(row, 'source').iloc[0]}→{_text(row, 'destination').iloc[0]})"
        with contextlib.suppress(UserError):
            yield path.stem, read_tcp_table(path, f"{path.stem}{where}, {backend}")


def _tcp_section(r: _Run) -> list[str]:
    lines = []
    for flow, trace in _tcp_traces(r):
        recoveries = trace.recoveries()
        lines.append(f"- {flow}: {describe_recoveries(recoveries)}")
    return lines or [f"_No TCP segment tables (`{r.name(r.folder.tcp)}/`): a simulated run, "
                     "or a run with `--capture`, has them._"]  # fmt: skip


def _draw_tcp(r: _Run) -> list[str]:
    made = []
    for flow, trace in _tcp_traces(r):
        path = r.folder.plots / f"tcp-{flow}.png"
        plot_sequence([trace], path)
        made.append(f"![{flow}: sequence numbers over time]({r.name(path)})")
    return made


SECTIONS = [("Flows", _flow_section), ("Events", _event_section),
            ("Programs", _program_section), ("Links", _link_section),
            ("TCP recovery", _tcp_section)]  # fmt: skip


def write_report(run: Path) -> Path:
    """Writes run/report.md and run/plots/*.png from whatever tables the run folder holds;
    returns the report path."""
    r = _load(run)
    lines = _header(r)
    for title, section in SECTIONS:
        lines += ["", f"## {title}", "", *section(r)]
    images = _draw(r) + _draw_tcp(r)
    lines += ["", "## Plots", "", *(images or ["_No plots: the run recorded no series to draw._"])]
    path = r.folder.report
    text = "\n".join(lines) + "\n"
    write_whole(path, lambda tmp: tmp.write_text(text))
    return path
