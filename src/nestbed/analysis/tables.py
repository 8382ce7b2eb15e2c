"""The tables of an analysis: transfers.csv (one row per transfer, verdict and evidence),
unusable.csv (packets not used, per capture and reason), the per-bin idle time read back
for CPU correlation, and report.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from nestbed.results import markdown

TRANSFER_COLUMNS = [
    "transfer", "file", "src", "sport", "dst", "dport", "ip_version", "start_unix_s",
    "duration_s", "bytes", "verdict",
]  # fmt: skip
EVIDENCE_COLUMNS = [
    "throughput_bytes_per_s", "ideal_bytes_per_s", "ratio", "network_predicted_bytes_per_s",
    "rtt_min_s", "rtt_p50_s", "rtt_inflation", "loss_rate", "retransmitted_segments",
    "spacing_mean_s", "spacing_max_s", "transmission_period_s", "idle_s", "idle_share",
    "window_bytes", "payload_bytes", "packet_bytes", "capture_position", "cpu_corroborates",
]  # fmt: skip


def write_transfers(folder: Path, transfers: list[dict[str, Any]]) -> Path:
    """transfers.csv: identity, verdict, the evidence's figures, CPU figures, the reason."""
    rows = []
    for t in transfers:
        e = t["evidence"]
        cpu = e.get("cpu") or {}
        rows.append({**{c: t[c] for c in TRANSFER_COLUMNS},
                     **{c: e.get(c) for c in EVIDENCE_COLUMNS},
                     "cpu_node": cpu.get("node"), "cpu_available_min": cpu.get("available_min"),
                     "cpu_r_idle_unavailable": cpu.get("r_idle_unavailable"),
                     "reason": t["reason"]})  # fmt: skip
    path = folder / "transfers.csv"
    columns = [*TRANSFER_COLUMNS, *EVIDENCE_COLUMNS, "cpu_node", "cpu_available_min",
               "cpu_r_idle_unavailable", "reason"]  # fmt: skip
    pd.DataFrame(rows, columns=columns).to_csv(path, index=False)
    return path


def write_unusable(folder: Path, captures: list[dict[str, Any]]) -> Path:
    """unusable.csv: capture, file, reason, packets (reasons with none are left out)."""
    rows = [{"capture": c["capture"], "file": c["file"], "reason": reason, "packets": n}
            for c in captures for reason, n in sorted(c["unusable"].items())]  # fmt: skip
    path = folder / "unusable.csv"
    pd.DataFrame(rows, columns=["capture", "file", "reason", "packets"]).to_csv(path, index=False)
    return path


def read_idle(folder: Path) -> pd.DataFrame:
    """The idle-time column of series.csv: transfer, t_s, idle_s."""
    return pd.read_csv(folder / "series.csv", usecols=["transfer", "t_s", "idle_s"])


def idle_per_bin(idle: pd.DataFrame, transfer: dict[str, Any], bin_s: float) -> pd.DataFrame:
    """The sender's idle time per bin of ``transfer``: unix_s (bin middle), idle_s."""
    rows = idle[idle["transfer"] == transfer["transfer"]]
    return pd.DataFrame({"unix_s": transfer["start_unix_s"] + rows["t_s"] + bin_s / 2,
                         "idle_s": rows["idle_s"]})  # fmt: skip


def write_report(folder: Path, summary: dict[str, Any], plots: list[tuple[str, str]]) -> Path:
    """report.md: captures and unusable packets, one line per transfer, the plots."""
    lines = ["# Trace analysis", "", "## Captures", ""]
    lines += markdown.table(
        ["Capture", "Format", "Records", "TCP segments", "Unusable"],
        [[f"`{c['file']}`", c["format"], f"{c['records']:,}", f"{c['tcp_segments']:,}",
          f"{c['unusable_total']:,} ({_unusable(c)})"] for c in summary["captures"]],
    )  # fmt: skip
    lines += ["", "## Transfers", ""]
    lines += markdown.table(
        ["#", "Path", "Throughput", "Ideal", "Verdict", "Why"],
        [[t["transfer"], f"{t['src']}:{t['sport']} → {t['dst']}:{t['dport']}",
          *_rates(t["evidence"]), t["verdict"], t["reason"]] for t in summary["transfers"]],
    )  # fmt: skip
    if not summary["transfers"]:
        lines.append("_No TCP transfer carried payload in these captures._")
    lines += ["", "## Plots", "", *(f"![{c}]({f})" for f, c in plots)]
    path = folder / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _unusable(capture: dict[str, Any]) -> str:
    return ", ".join(f"{r} {n}" for r, n in sorted(capture["unusable"].items())) or "none"


def _rates(evidence: dict[str, Any]) -> list[str]:
    """Throughput and ideal rate of a transfer, in Mb/s."""
    got, ideal = evidence.get("throughput_bytes_per_s"), evidence.get("ideal_bytes_per_s")
    return [f"{8 * v / 1e6:.3g} Mb/s" if v else "—" for v in (got, ideal)]
