"""report.md of a calibration (tables and plots from its results folder), and the report that
compares two calibrations as the instrument's baseline."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nestbed.results import markdown
from nestbed.studies.calibrate import plots
from nestbed.studies.calibrate.study import read_csv


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{float(value):.{digits}f}"


def _pm(row: Mapping[str, Any], metric: str, digits: int = 2) -> str:
    half = row.get(f"{metric}_ci95")
    return _f(row[metric], digits) + (f" ± {_f(half, digits)}" if half not in (None, "") else "")


def _targets(points: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(topology, profile) in the order measured: topologies as first met, untuned first."""
    seen: dict[tuple[str, str], None] = {}
    for r in points:
        seen[(str(r["topology"]), str(r["profile"]))] = None
    order = {t: i for i, t in enumerate(dict.fromkeys(t for t, _ in seen))}
    return sorted(seen, key=lambda k: (order[k[0]], k[1] != "untuned", k[1]))


def write(folder: Path) -> Path:
    """Draws the plots into FOLDER/plots and writes FOLDER/report.md; returns its path."""
    points = read_csv(folder / "points.csv")
    receivers = read_csv(folder / "receivers.csv")
    knees = read_csv(folder / "knees.csv")
    checks = read_csv(folder / "loss-check.csv")
    manifest = json.loads((folder / "calibration.json").read_text())
    out = folder / "plots"
    out.mkdir(exist_ok=True)
    s = manifest["settings"]
    host = manifest["host"]
    lines = [
        "# Calibration of the instrument",
        "",
        f"Host {host['hostname']}, kernel {host['kernel']}, {host['cpus']} CPUs; "
        f"{manifest['duration_s']:.0f} s. Packet sizes {s['sizes']} B (UDP payload, the "
        f"12-byte probe header included), bursts {s['bursts']} packets sent back to back, "
        f"{s['repetitions']} repetitions, {s['gap_s']} s after each burst. Loss at A, B and C "
        "is counted against the packets the sender application tried to send, so A + B + C "
        "is the end-to-end loss; ± is the 95 % Student t interval over repetitions.",
        "",
    ]
    if manifest.get("sessions"):
        lines += ["Measured in sessions: " + "; ".join(manifest["sessions"]) + ".", ""]
    if not manifest.get("complete", True):
        lines += ["**This calibration did not finish; the tables hold what it measured.**", ""]
    lines += _profiles(manifest)
    lines += [
        "## Knees",
        "",
        f"The smallest packet size from which end-to-end loss stays at or below "
        f"{s['threshold_pct']} % for every larger size (– : none, the largest size loses more).",
        "",
    ]
    lines += markdown.table(
        ("target", "burst", "knee (B)", "worst loss", "at size (B)"),
        [
            (
                f"{k['topology']}, {k['profile']}",
                str(k["burst"]),
                str(k["knee_size"]) if k["knee_size"] is not None else "–",
                f"{_f(k['worst_loss_pct'])} %",
                str(k["worst_size"]),
            )
            for k in knees
        ],
    )
    if checks:
        lines += [
            "",
            "## Configured loss",
            "",
            "A link configured to lose packets must show that loss at B, between the "
            "interfaces, and none at A or C. The interval is 99.9 % (Wilson).",
            "",
        ]
        lines += markdown.table(
            ("target", "configured", "at A", "at B", "B rate [interval]", "at C", "agrees"),
            [
                (
                    f"{c['topology']}, {c['profile']}",
                    f"{float(c['configured_loss']) * 100:g} %",
                    str(c["a"]),
                    str(c["b"]),
                    f"{float(c['b_rate']) * 100:.2f} % [{float(c['b_low']) * 100:.2f}, "
                    f"{float(c['b_high']) * 100:.2f}]",
                    str(c["c"]),
                    str(c["b_agrees"]),
                )
                for c in checks
            ],
        )
    captured = read_csv(folder / "capture-check.csv")
    if captured:
        lines += [
            "",
            "## Counters against captures",
            "",
            "Packets lost at A, B and C counted from the interface counters and from "
            "tcpdump at the sender's and receivers' interfaces (the paper's cross-check); "
            "tcpdump's own drops would make the captures see less than happened. One-way "
            "delay interface to interface (capture stamps) against application to "
            "application (the probe's clock).",
            "",
        ]
        lines += markdown.table(
            (
                "target",
                "bursts",
                "A counters / captures",
                "B counters / captures",
                "C counters / captures",
                "tcpdump drops",
                "one-way µs, interfaces",
                "one-way µs, applications",
            ),
            [
                (
                    f"{c['topology']}, {c['profile']}",
                    str(c["bursts"]),
                    f"{c['counters_a']} / {c['captures_a']}",
                    f"{c['counters_b']} / {c['captures_b']}",
                    f"{c['counters_c']} / {c['captures_c']}",
                    str(c["tcpdump_dropped"]),
                    _f(c["if_owd_mean_us"], 0),
                    _f(c["app_owd_mean_us"], 0),
                )
                for c in captured
            ],
        )
    for topology, profile in _targets(points):
        lines += ["", f"## {topology}, {profile}", ""]
        p = plots.loss_points(points, topology, profile, out / f"loss-{topology}-{profile}.png")
        lines += [f"![loss at A, B, C]({p.relative_to(folder)})", ""]
        p = plots.heat_map(points, topology, profile, out / f"heatmap-{topology}-{profile}.png")
        lines += [f"![loss over packet size and burst size]({p.relative_to(folder)})", ""]
        if (
            any(r["topology"] == topology and r["profile"] == profile for r in receivers)
            and len({r["receiver"] for r in receivers if r["topology"] == topology}) > 1
        ):
            p = plots.per_receiver(
                receivers, topology, profile, out / f"receivers-{topology}-{profile}.png"
            )
            lines += [f"![loss per receiver]({p.relative_to(folder)})", ""]
        lines += markdown.table(
            ("size", "burst", "A %", "B %", "C %", "total %", "one-way µs", "RTT µs"),
            [
                (
                    str(r["size"]),
                    str(r["burst"]),
                    _pm(r, "loss_a_pct"),
                    _pm(r, "loss_b_pct"),
                    _pm(r, "loss_c_pct"),
                    _pm(r, "loss_total_pct"),
                    _pm(r, "owd_mean_us", 0),
                    _pm(r, "rtt_mean_us", 0),
                )
                for r in points
                if r["topology"] == topology and r["profile"] == profile
            ],
        )
    rates = [r for r in points if r.get("sender_pps") not in (None, "")]
    if rates:
        bursts = sorted({r["burst"] for r in rates})
        lines += [
            "",
            "## Sender packet rate",
            "",
            f"Datagrams per second the sender's socket accepted inside a burst of "
            f"{bursts[-1]} (the paper's Table 2 gives the rate a NIC must sustain per "
            "packet size); a receiver that reads slower than this falls behind, and "
            "its socket buffer decides how far.",
            "",
        ]
        lines += markdown.table(
            ("target", *(f"{size} B" for size in sorted({r["size"] for r in rates}))),
            [
                (
                    f"{t}, {p}",
                    *(
                        _f(r["sender_pps"], 0)
                        for r in sorted(
                            (
                                r
                                for r in rates
                                if (r["topology"], r["profile"]) == (t, p)
                                and r["burst"] == bursts[-1]
                            ),
                            key=lambda r: r["size"],
                        )
                    ),
                )
                for t, p in _targets(rates)
            ],
        )
    topologies = sorted({t for t, _ in _targets(points)})
    if topologies:
        lines += ["", "## Delay, tuned against untuned", ""]
        for topology in topologies:
            p = plots.delay(points, topology, out / f"delay-{topology}.png")
            lines += [f"![delay]({p.relative_to(folder)})", ""]
    lines += [
        "",
        "Tables: `bursts.csv` (every burst at every receiver, with the counters), "
        "`points.csv`, `receivers.csv`, `knees.csv`, `loss-check.csv`; per-packet logs "
        "in `raw/`; each swap-in's run folder in `runs/`.",
        "",
    ]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path


def _profiles(manifest: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Profiles",
        "",
        "untuned: the kernel's defaults. tuned (the paper's): txqueuelen 10000 on each "
        "calibrated interface, socket buffers of 12582912 B forced by the probe "
        "(SO_RCVBUFFORCE, SO_SNDBUFFORCE); the host's netdev_max_backlog 65536 and "
        "rmem_max/wmem_max 12582912 only with --tune-host (they are global on Linux, "
        "and restored afterwards).",
        "",
    ]
    rows = []
    for key, facts in manifest.get("facts", {}).items():
        node = next(iter(facts.get("nodes", {}).values()), {})
        host = facts.get("host_sysctls", {})
        rows.append(
            (
                key,
                str(node.get("txqueuelen", "–")),
                node.get("qdisc", "–"),
                host.get("net.core.netdev_max_backlog", "–"),
                host.get("net.core.rmem_max", "–"),
            )
        )
    if rows:
        lines += markdown.table(
            ("target", "txqueuelen", "qdisc", "host backlog", "host rmem_max"), rows
        )
        lines.append("")
    return lines


def write_comparison(first: Path, second: Path, folder: Path) -> Path:
    """FOLDER/report.md: the two calibrations' points side by side, with differences whose
    95 % intervals do not overlap marked."""
    a, b = read_csv(first / "points.csv"), read_csv(second / "points.csv")
    labels = (first.name, second.name)
    key = ("topology", "profile", "size", "burst")
    index = {tuple(r[k] for k in key): r for r in b}
    rows = []
    for ra in a:
        rb = index.get(tuple(ra[k] for k in key))
        if rb is None:
            continue
        cells = [str(ra[k]) for k in key]
        for metric, digits in (("loss_total_pct", 2), ("owd_mean_us", 0)):
            cells += [
                _pm(ra, metric, digits),
                _pm(rb, metric, digits),
                "yes" if _differ(ra, rb, metric) else "",
            ]
        rows.append(cells)
    out = folder / "plots"
    out.mkdir(parents=True, exist_ok=True)
    plot = plots.comparison(a, b, labels, out / "comparison.png")
    ka, kb = read_csv(first / "knees.csv"), read_csv(second / "knees.csv")
    kindex = {(k["topology"], k["profile"], k["burst"]): k for k in kb}
    knee_rows = [
        (
            f"{k['topology']}, {k['profile']}",
            str(k["burst"]),
            str(k["knee_size"] or "–"),
            str(
                (kindex.get((k["topology"], k["profile"], k["burst"])) or {}).get("knee_size")
                or "–"
            ),
        )
        for k in ka
    ]
    lines = [
        f"# Calibrations compared: {labels[0]} and {labels[1]}",
        "",
        f"{len(rows)} points in common. *differs*: the two 95 % intervals do not overlap.",
        "",
        f"![comparison]({plot.relative_to(folder)})",
        "",
        "## Knees",
        "",
        *markdown.table(("target", "burst", f"knee {labels[0]}", f"knee {labels[1]}"), knee_rows),
        "",
        "## Points",
        "",
        *markdown.table(
            (
                "topology",
                "profile",
                "size",
                "burst",
                f"loss % {labels[0]}",
                f"loss % {labels[1]}",
                "differs",
                f"one-way µs {labels[0]}",
                f"one-way µs {labels[1]}",
                "differs",
            ),
            rows,
        ),
        "",
    ]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path


def _differ(a: Mapping[str, Any], b: Mapping[str, Any], metric: str) -> bool:
    try:
        ma, mb = float(a[metric]), float(b[metric])
    except (TypeError, ValueError):
        return False
    ha, hb = a.get(f"{metric}_ci95"), b.get(f"{metric}_ci95")
    if ha in (None, "") or hb in (None, ""):
        return False  # a single repetition has no interval to tell a difference by
    return abs(ma - mb) > float(ha) + float(hb)
