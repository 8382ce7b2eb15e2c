"""``analyze``: captures in, a folder of tables, plots and a JSON-able summary out."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nestbed.analysis import plots, tables
from nestbed.analysis.cpu import cpu_evidence, node_of, read_cpu
from nestbed.analysis.runner import run_analyzer
from nestbed.analysis.verdict import Thresholds, capture_position, judge
from nestbed.errors import UserError
from nestbed.results.folder import make_folder


def analyze(
    pcaps: list[Path],
    output: Path,
    *,
    cpu: Path | None = None,
    addresses: Mapping[str, Sequence[str]] | None = None,
    bin_s: float = 1.0,
) -> dict[str, Any]:
    """Analyzes TCP transfers in ``pcaps`` (pcap or pcapng, any mix) into ``output``.

    ``cpu`` is an optional CPU-availability table (nestbed.analysis.cpu); ``addresses`` maps
    node names to their IP addresses so each sender finds its node's row; ``bin_s`` is the
    width of time-series bins. A transfer seen in several captures is judged once, from the
    capture nearest its sender (the others are listed in ``also_in``).

    Writes into ``output``: summary.json (what this returns), transfers.csv, unusable.csv,
    series.csv, rtt.csv, spacing.csv, window.csv, report.md and plots/*.png.

    Returns {"captures": [{capture, file, format, linktypes, records, tcp_segments,
    truncated_payloads, unusable: {reason: packets}, unusable_total, ...}], "unusable":
    {reason: packets over all captures}, "transfers": [{transfer, capture, file, src, sport,
    dst, dport, ip_version, start_unix_s, duration_s, bytes, verdict, reason, evidence,
    also_in}], "verdicts": {verdict: count}, "output": str, "plots": [file]}; verdict is
    "normal", "network-limited", "host anomaly" or "inconclusive" (docs/analyze.md).
    Raises UserError for a missing or unreadable capture or CPU table.
    """
    pcaps = [Path(p) for p in pcaps]
    if not pcaps:
        raise UserError("give at least one capture (pcap or pcapng) to analyze")
    for p in pcaps:
        if not p.is_file():
            raise UserError(f"the capture {p} does not exist")
    make_folder(output)
    report = run_analyzer(pcaps, output, bin_s=bin_s)
    cpu_table = read_cpu(cpu) if cpu is not None else None
    idle = tables.read_idle(output) if cpu_table is not None else None
    files = {c["capture"]: c["file"] for c in report["captures"]}
    transfers = []
    for t, others in _one_view_each(report["transfers"]):
        evidence = None
        if cpu_table is not None and idle is not None:
            node = node_of(cpu_table, t["src"], addresses)
            start = t["start_unix_s"] + t["first_data_s"]
            end = t["start_unix_s"] + t["end_s"]
            per_bin = tables.idle_per_bin(idle, t, bin_s)
            evidence = node and cpu_evidence(cpu_table, node, start, end, per_bin)
        v = judge(t, evidence or None)
        transfers.append({
            **{k: t[k] for k in ("transfer", "capture", "src", "sport", "dst", "dport",
                                 "ip_version", "start_unix_s", "duration_s")},
            "file": files[t["capture"]], "bytes": t["unique_bytes"],
            "verdict": v.verdict, "reason": v.reason, "evidence": v.evidence,
            "also_in": [files[o["capture"]] for o in others],
        })  # fmt: skip
    unusable: dict[str, int] = {}
    for c in report["captures"]:
        for reason, n in c["unusable"].items():
            unusable[reason] = unusable.get(reason, 0) + n
    summary: dict[str, Any] = {
        "captures": report["captures"],
        "unusable": dict(sorted(unusable.items())),
        "transfers": transfers,
        "verdicts": dict(pd.Series([t["verdict"] for t in transfers], dtype=str).value_counts()),
        "output": str(output),
    }
    summary["verdicts"] = {k: int(v) for k, v in summary["verdicts"].items()}
    tables.write_transfers(output, transfers)
    tables.write_unusable(output, report["captures"])
    drawn = plots.draw(output, transfers, cpu_table, bin_s)
    summary["plots"] = [f for f, _ in drawn]
    tables.write_report(output, summary, drawn)
    (output / "summary.json").write_text(json.dumps(summary, indent=1, default=_jsonable) + "\n")
    return json.loads(json.dumps(summary, default=_jsonable))


def _jsonable(x: Any) -> Any:
    """numpy numbers as Python ones."""
    return x.item() if hasattr(x, "item") else str(x)


def _one_view_each(
    transfers: list[dict[str, Any]],
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each transfer once: of the captures holding the same one (4-tuple and first sequence
    number), the one taken nearest its sender, then the one with most segments."""
    th = Thresholds()
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for t in transfers:
        key = (t["src"], t["sport"], t["dst"], t["dport"], t["first_seq"])
        groups.setdefault(key, []).append(t)

    def rank(t: dict[str, Any]) -> tuple[int, float, int]:
        position, share = capture_position(t, th)
        return (position != "sender", share if share is not None else 1.0, -t["data_segments"])

    chosen = []
    for views in groups.values():
        views = sorted(views, key=rank)
        chosen.append((views[0], views[1:]))
    return sorted(chosen, key=lambda tv: tv[0]["transfer"])
