"""Readable summaries of an experiment for the terminal (rich tables)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from nestbed.model.formulas import stationary_loss
from nestbed.units import format_bandwidth, format_delay, format_time


def shaping_text(s: dict[str, Any]) -> str:
    """`10Mb 20ms loss 0.01 droptail/100` — the parts of one direction that are set."""
    parts = [format_bandwidth(s["bandwidth_bps"]) if s.get("bandwidth_bps") else "unlimited"]
    parts.append(format_delay(s.get("delay_s", 0.0)))
    if s.get("jitter_s"):
        parts.append(f"±{format_delay(s['jitter_s'])} {s.get('jitter_distribution', 'uniform')}")
    if s.get("loss"):
        parts.append(f"loss {s['loss']:g}")
    if g := s.get("gilbert_elliott"):
        rate = stationary_loss(g["p"], g["r"], g.get("loss_bad", 1.0), g.get("loss_good", 0.0))
        parts.append(f"GE p={g['p']:g} r={g['r']:g} (loss {rate:.4g})")
    if s.get("drop_ordinals"):
        parts.append("drop #" + ",".join(map(str, s["drop_ordinals"])))
    q = s.get("queue") or {}
    limit = f"{q['limit']} {q.get('limit_unit', 'packets')}" if q.get("limit") else "auto"
    parts.append(f"{q.get('kind', 'droptail')} {limit}")
    return " ".join(parts)


def experiment_summary(exp: dict[str, Any]) -> Group:
    """The summary of an experiment, from its IR as JSON data (``Experiment.to_json``'s, as
    the store keeps it): `show` prints it without loading the IR's models."""
    all_links = [*exp.get("links", ()), *exp.get("lans", ())]
    node_list = exp.get("nodes", ())
    nodes = Table(
        title=f"experiment {exp['name']}: {len(node_list)} nodes, routing "
        f"{exp.get('routing', 'none')}",
        title_justify="left",
    )
    for col in ("node", "interfaces", "settings"):
        nodes.add_column(col)
    for n in node_list:
        ifaces = [
            f"{p['ip']}/{_prefixlen(p)} ({link['name']})"
            for link in all_links
            for p in link["ports"]
            if p["node"] == n["name"]
        ]
        settings = [
            f"{k} {v}"
            for k, v in (
                ("os", n.get("os")),
                ("hw", n.get("hardware_type")),
                ("cpu", n.get("cpu_cores")),
                ("mem", n.get("memory_bytes")),
                ("startcmd", n.get("startcmd")),
            )
            if v
        ]
        if n.get("routes"):
            settings.append(f"{len(n['routes'])} manual routes")
        nodes.add_row(n["name"], "\n".join(ifaces), ", ".join(settings))
    links = Table(title="links and LANs (per direction)", title_justify="left")
    for col in ("name", "direction", "shaping"):
        links.add_column(col)
    for link in all_links:
        label = link["name"] if link["kind"] == "link" else f"{link['name']} (LAN)"
        ports = link["ports"]
        for i, p in enumerate(ports):
            egress, ingress = p.get("egress") or {}, p.get("ingress") or {}
            first = label if i == 0 else ""
            if link["kind"] == "link":
                other = ports[1 - i]["node"]
                links.add_row(first, f"{p['node']} → {other}", shaping_text(egress))
            else:
                links.add_row(first, f"{p['node']} → switch", shaping_text(egress))
                links.add_row("", f"switch → {p['node']}", shaping_text(ingress))
    parts: list = [nodes, links]
    agents, applications = exp.get("agents", ()), exp.get("applications", ())
    programs = exp.get("programs", ())
    if agents or applications or programs:
        traffic = Table(title="traffic and programs", title_justify="left")
        for col in ("name", "kind", "where", "settings"):
            traffic.add_column(col)
        for a in agents:
            traffic.add_row(
                a["name"],
                a["kind"] + (f"/{a['variant']}" if a.get("variant") else ""),
                a["node"],
                f"peer {a['peer']}" if a.get("peer") else "",
            )
        for app in applications:
            rate = (
                f"every {format_delay(app['interval_s'])}"
                if app.get("interval_s")
                else format_bandwidth(app.get("rate_bps", 100_000_000))
            )
            size = app.get("packet_size_bytes", 210)
            detail = f"{size} B at {rate}" if app["kind"] == "cbr" else ""
            traffic.add_row(app["name"], app["kind"], f"on {app['agent']}", detail)
        for p in programs:
            traffic.add_row(p["name"], "program", p["node"], p["command"])
        parts.append(traffic)
    if exp.get("events"):
        events = Table(title="event timeline", title_justify="left")
        for col in ("time (s)", "object", "action"):
            events.add_column(col)
        for e in exp["events"]:
            action = " ".join([e["verb"], *e.get("args", ())])
            events.add_row(format_time(e["time_s"]), e["object"], action)
        parts.append(events)
    for w in exp.get("warnings", ()):
        where = w.get("where") or {}
        place = f"{where['file']}:{where['line']}: " if where.get("line") else ""
        parts.append(Text(f"warning: {place}{w['message']}", style="yellow"))
    return Group(*parts)


def _prefixlen(port: dict[str, Any]) -> int:
    return ipaddress.IPv4Interface(f"{port['ip']}/{port['netmask']}").network.prefixlen


def print_summary(exp: dict[str, Any], console: Console) -> None:
    """Prints the summary of an experiment given as its IR's JSON data."""
    console.print(experiment_summary(exp))


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _table(title: str, columns: dict[str, Callable[[dict], str]], rows: list[dict]) -> Table:
    table = Table(title=title, title_justify="left")
    for header in columns:
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(*(cell(row) for cell in columns.values()))
    return table


_VALIDATE_TABLES: dict[str, tuple[str, dict[str, Callable[[dict], str]]]] = {
    "delay": (
        "Table 1: delay (RTT of echoed UDP; one-way on the shared clock)",
        {
            "delay ms": lambda r: f"{r['delay_ms']:g}",
            "frame B": lambda r: str(r["frame_bytes"]),
            "pps": lambda r: str(r["pps"]),
            "RTT ms": lambda r: f"{r['rtt_ms']:.3f}",
            "stdev ms": lambda r: f"{r['rtt_stdev_ms']:.3f}",
            "err µs": lambda r: f"{r['rtt_error_us']:+.1f}",
            "% err": lambda r: _num(r["rtt_error_pct"], ".2f"),
            "one-way err µs": lambda r: f"{r['one_way_error_us']:+.1f}",
            "one-way stdev µs": lambda r: f"{r['one_way_stdev_us']:.1f}",
            "linkd late µs": lambda r: _num(r.get("linkd_late_mean_us"), ".1f"),
            "linkd late stdev µs": lambda r: _num(r.get("linkd_late_stdev_us"), ".1f"),
            "Dummynet RTT ms": lambda r: _num(r["dummynet_rtt_ms"], ".3f"),
        },
    ),
    "bandwidth": (
        "Table 2: bandwidth (receiver goodput on the wire, offered +5 % into a 20 ms queue)",
        {
            "configured kb/s": lambda r: f"{r['bandwidth_bps'] / 1000:g}",
            "frame B": lambda r: str(r["frame_bytes"]),
            "sent kb/s": lambda r: _num(r.get("sent_bps") and r["sent_bps"] / 1000, ".2f"),
            "measured kb/s": lambda r: f"{r['measured_bps'] / 1000:.2f}",
            "% err": lambda r: _num(r["error_pct"], ".3f"),
            "Dummynet % err": lambda r: _num(r["dummynet_error_pct"], ".2f"),
        },
    ),
    "loss": (
        "Table 3: loss (99 % Wilson interval of the measured rate)",
        {
            "configured %": lambda r: f"{r['loss'] * 100:g}",
            "frame B": lambda r: str(r["frame_bytes"]),
            "packets": lambda r: str(r["packets"]),
            "measured %": lambda r: f"{r['measured_loss'] * 100:.3f}",
            "99 % interval": lambda r: "{:.3f}-{:.3f}".format(*(x * 100 for x in r["interval_99"])),
            "inside": lambda r: "yes" if r["inside"] else "NO",
            "% err": lambda r: _num(r["error_pct"], ".2f"),
            "Dummynet % err": lambda r: _num(r["dummynet_error_pct"], ".1f"),
        },
    ),
    "gilbert_elliott": (
        "Gilbert-Elliott loss",
        {
            "loss rate %": lambda r: f"{r['loss_rate'] * 100:g}",
            "burst": lambda r: f"{r['burst_length']:g}",
            "packets": lambda r: str(r["packets"]),
            "measured %": lambda r: f"{r['measured_loss_rate'] * 100:.3f}",
            "measured burst": lambda r: f"{r['measured_burst_length']:.3f}",
            "rate % err": lambda r: _num(r["loss_rate_error_pct"], ".2f"),
            "burst % err": lambda r: _num(r["burst_length_error_pct"], ".2f"),
        },
    ),
    "jitter": (
        "Jitter (uniform, order kept)",
        {
            "delay ms": lambda r: f"{r['delay_ms']:g}",
            "± ms": lambda r: f"{r['jitter_ms']:g}",
            "mean ms": lambda r: f"{r['mean_ms']:.3f}",
            "stdev ms": lambda r: f"{r['stdev_ms']:.3f}",
            "uniform stdev ms": lambda r: f"{r['uniform_stdev_ms']:.3f}",
            "min ms": lambda r: f"{r['min_ms']:.3f}",
            "max ms": lambda r: f"{r['max_ms']:.3f}",
            "reordered": lambda r: str(r["reordered"]),
        },
    ),
}


_VALIDATE_SIMULATED_TABLES: dict[str, tuple[str, dict[str, Callable[[dict], str]]]] = {
    "delay": (
        "Table 1: delay of a simulated link (RTT of echoed UDP at 4000 packets/s each way)",
        {
            "delay ms": lambda r: f"{r['delay_ms']:g}",
            "frame B": lambda r: str(r["frame_bytes"]),
            "RTT ms": lambda r: f"{r['rtt_ms']:.3f}",
            "stdev ms": lambda r: f"{r['rtt_stdev_ms']:.3f}",
            "% err": lambda r: _num(r["rtt_error_pct"], ".2f"),
            "adjusted ms": lambda r: _num(r["adjusted_rtt_ms"], ".3f"),
            "adj. % err": lambda r: _num(r["adjusted_error_pct"], ".2f"),
            "nse RTT ms": lambda r: _num(r["nse_rtt_ms"], ".3f"),
            "nse % err": lambda r: _num(r["nse_error_pct"], ".2f"),
            "nse adj. % err": lambda r: _num(r["nse_adjusted_error_pct"], ".2f"),
            "nse/ours": lambda r: _num(r["nse_over_ours"], ".1f"),
        },
    ),
}


def _beside_nse(name: str, title: str) -> tuple[str, dict[str, Callable[[dict], str]]]:
    """An emulated table's columns for a simulated link: nse's error instead of Dummynet's,
    and how many times ours it is."""
    columns = {k: v for k, v in _VALIDATE_TABLES[name][1].items() if not k.startswith("Dummynet")}
    columns["nse % err"] = lambda r: _num(r["nse_error_pct"], ".2f")
    columns["nse/ours"] = lambda r: _num(r["nse_over_ours"], ".1f")
    return title, columns


_VALIDATE_SIMULATED_TABLES["bandwidth"] = _beside_nse(
    "bandwidth",
    "Table 2: bandwidth of a simulated link (Ethernet frames on the wire, offered +5 %)",
)
_VALIDATE_SIMULATED_TABLES["loss"] = _beside_nse(
    "loss", "Table 3: loss of a simulated link (99 % Wilson interval of the measured rate)"
)


def validate_tables(tables: dict) -> Group:
    """The accuracy tables of `nestbed validate`, laid out like the Netbed paper's (with
    ``--simulated``, its nse columns)."""
    layout = _VALIDATE_SIMULATED_TABLES if tables.get("simulated") else _VALIDATE_TABLES
    parts: list = [
        _table(title, columns, tables.get(name, [])) for name, (title, columns) in layout.items()
    ]
    if "lag" in tables:
        lag = tables["lag"]
        parts.append(
            Text(
                f"nestbed-sim's worst lag behind real time {lag['worst_s'] * 1e3:.1f} ms; "
                f"{lag['seconds_over_5ms']} of {lag['seconds']} seconds over 5 ms"
            )
        )
    return Group(*parts)


def _rate(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e6:.3f} Mb/s"


def run_summary(s: dict) -> Group:
    """What `nestbed run` prints: outcome, flows, event timing, programs, where the results are."""
    reason = f" ({s['reason']})" if s.get("reason") else ""
    duration = _num(s.get("duration_s"), ".1f")
    head = Text(f"run of {s['experiment']}: {s['outcome']}{reason}, {duration} s")
    flows = _table(
        "traffic",
        {
            "flow": lambda f: str(f["flow"]),
            "kind": lambda f: str(f["kind"]),
            "path": lambda f: str(f["path"]),
            "throughput": lambda f: _rate(f.get("throughput_bps")),
            "loss": lambda f: (
                _num(None if f.get("loss") is None else f["loss"] * 100, ".3f")
                + (" %" if f.get("loss") is not None else "")
            ),
            "delay (ms)": lambda f: _num(f.get("delay_mean_ms"), ".3f"),
        },
        s.get("flows", []),
    )
    t = s.get("timing_ms") or {}
    timing = Text(
        "event timing error: "
        + ", ".join(f"{k} {_num(t.get(k), '.3f')} ms" for k in ("p50", "p99", "max"))
    )
    progs = s.get("programs") or {}
    programs = Text(
        f"programs: {progs.get('ok', 0)} ok, {progs.get('failed', 0)} failed of "
        f"{progs.get('total', 0)}"
    )
    kept = " (the experiment is still active)" if s.get("kept") else ""
    return Group(head, flows, timing, programs, Text(f"results in {s['results']}{kept}"))


def status_tables(data: dict) -> Group:
    """What `nestbed status` prints."""
    head = Text(
        f"{data['experiment']}: run {data.get('run_id')} at {data['elapsed_s']:.1f} s, "
        f"{data['pending_events']} events pending"
        + (f", ended: {data['outcome'].get('outcome')}" if data.get("finished") else "")
        + f"; results in {data['results']}"
    )
    nodes = _table(
        "nodes", {"node": lambda n: n["node"], "namespace": lambda n: n["namespace"]}, data["nodes"]
    )
    links = _table(
        "links",
        {
            "link": lambda r: r["link"],
            "state": lambda r: r["state"],
            "port": lambda r: r.get("port", ""),
            "direction": lambda r: r.get("direction", ""),
            "packets out": lambda r: str(r.get("packets_out", "")),
            "drops": lambda r: str(r.get("drops", "")),
            "queue": lambda r: str(r.get("queue_packets", "")),
        },
        data.get("link_counters") or [{"link": k, "state": v} for k, v in data["links"].items()],
    )
    programs = _table(
        "programs",
        {
            "program": lambda p: p["program"],
            "node": lambda p: p["node"],
            "state": lambda p: p["state"],
            "runs": lambda p: str(p["invocations"]),
            "exit": lambda p: "" if p["exit_code"] is None else str(p["exit_code"]),
        },
        data["programs"],
    )
    flows = _table(
        "traffic",
        {
            "flow": lambda f: f["flow"],
            "kind": lambda f: f["kind"],
            "running": lambda f: "yes" if f["running"] else "no",
            "starts": lambda f: str(f["starts"]),
        },
        data["flows"],
    )
    parts = [head, nodes, links, programs, flows]
    if data.get("link_counters_unanswered"):
        why = data["link_counters_unanswered"]
        parts.insert(3, Text(f"the link emulators gave no counters now: {why}"))
    return Group(*parts)


_VERDICT_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def linktest_tables(report: dict) -> Group:
    """A table per level of a linktest report (its JSON form), then the counts."""
    from nestbed.linktest.run import LEVELS

    parts: list[Table | Text] = []
    for level, title in LEVELS.items():
        rows = [c for c in report["checks"] if c["level"] == level]
        if not rows:
            continue
        table = Table(title=f"level {level}: {title}", title_justify="left")
        for col in ("link", "direction", "expected", "measured", "verdict", "reason"):
            table.add_column(col, overflow="fold")
        for c in rows:
            verdict = Text(c["verdict"], style=_VERDICT_STYLE.get(c["verdict"], ""))
            table.add_row(c["link"], c["direction"], c["expected"], c["measured"], verdict,
                          c["reason"])  # fmt: skip
        parts.append(table)
    counts = report["counts"]
    style = "bold red" if counts["fail"] else "green"
    parts.append(
        Text(
            f"linktest of {report['experiment']}, level {report['level']}: {counts['pass']} "
            f"passed, {counts['fail']} failed, {counts['skip']} skipped in "
            f"{report['seconds']:.1f} s",
            style=style,
        )
    )
    return Group(*parts)


def analysis_table(summary: dict) -> Group:
    """One row per TCP transfer of an analysis: its path, verdict and the reason."""
    table = Table(title="TCP transfers", title_justify="left")
    for col in ("transfer", "from → to", "verdict", "reason"):
        table.add_column(col, overflow="fold")
    style = {"normal": "green", "network-limited": "yellow", "host anomaly": "bold red"}
    for t in summary["transfers"]:
        path = f"{t['src']}:{t['sport']} → {t['dst']}:{t['dport']}"
        verdict = Text(t["verdict"], style=style.get(t["verdict"], ""))
        table.add_row(str(t["transfer"]), path, verdict, t.get("reason", ""))
    unusable = summary.get("unusable") or {}
    note = ", ".join(f"{n} {reason}" for reason, n in sorted(unusable.items()) if n)
    return Group(table, Text(f"packets not used: {note or 'none'}"))
