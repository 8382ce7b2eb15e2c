"""The calibration from settings to results folder: targets, measurement, tables, report."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestbed.errors import UserError
from nestbed.model import Experiment
from nestbed.studies.calibrate import stats
from nestbed.studies.calibrate.settings import Settings
from nestbed.studies.calibrate.topology import HOST_TUNING, Target, builtin, target

Progress = Callable[[str, int], None]


@dataclass(frozen=True)
class Outcome:
    folder: Path
    report: Path
    knees: list[dict[str, Any]]
    summary: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return _finite(
            {
                "folder": str(self.folder),
                "report": str(self.report),
                "knees": self.knees,
                **self.summary,
            }
        )


def _finite(value: Any) -> Any:
    """NaN (no data) as null, so the JSON is valid."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def plan_targets(
    settings: Settings,
    *,
    experiment: Experiment | None = None,
    sender: str | None = None,
    receivers: tuple[str, ...] | None = None,
    multicast: bool = False,
) -> list[Target]:
    """What will be swapped in, in order; every name checked before anything runs."""
    targets = []
    for profile in settings.profiles:
        if experiment is not None:
            if not sender or not receivers:
                raise UserError("with --experiment, name the --sender and the --receiver-nodes")
            targets.append(
                target(
                    experiment,
                    topology=experiment.name,
                    profile=profile,
                    sender=sender,
                    receivers=receivers,
                    multicast=multicast,
                )
            )
            continue
        for topology in settings.topologies:
            exp = builtin(topology, receivers=settings.receivers, loss=settings.loss)
            nodes = tuple(n.name for n in exp.nodes if n.name != "s")
            targets.append(
                target(
                    exp,
                    topology=topology,
                    profile=profile,
                    sender="s",
                    receivers=nodes,
                    multicast=topology == "lan",
                    configured_loss=settings.loss if topology == "loss" else 0.0,
                )
            )
    return targets


def total_bursts(settings: Settings, targets: Iterable[Target]) -> int:
    per_target = len(settings.sizes) * len(settings.bursts) * settings.repetitions
    return per_target * len(list(targets))


BURST_COLUMNS = (
    "topology", "profile", "mode", "receiver", "size", "burst", "rep", "attempted", "refused",
    "sender_interface", "sender_dropped", "receiver_interface", "receiver_dropped", "received",
    "rcvbuf_errors", "in_errors", "ethtool_drops", "a", "b", "c", "total", "loss_a_pct",
    "loss_b_pct", "loss_c_pct", "loss_total_pct", "owd_mean_us", "owd_median_us", "owd_p99_us",
    "echoes", "rtt_mean_us", "rtt_median_us", "configured_loss", "sender_pps", "cap_sender",
    "cap_receiver", "cap_a", "cap_b", "cap_c", "cap_dropped", "if_owd_mean_us",
)  # fmt: skip


def write_csv(
    path: Path, rows: list[Mapping[str, Any]], columns: Iterable[str] | None = None
) -> None:
    cols = list(columns or (rows[0].keys() if rows else []))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in cols})


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def read_csv(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _parse(text: str) -> Any:
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def loss_checks(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For links with configured loss: where the loss landed, against a 99.9 % binomial
    interval of the configured rate at B."""
    out = []
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.get("configured_loss"):
            groups.setdefault((r["topology"], r["profile"]), []).append(r)
    for (topology, profile), group in sorted(groups.items()):
        attempted = sum(int(r["attempted"]) for r in group)
        handled = sum(int(r["sender_interface"]) for r in group)
        a, b, c = (sum(int(r[k]) for r in group) for k in ("a", "b", "c"))
        low, high = stats.binomial_interval(b, handled)
        configured = float(group[0]["configured_loss"])
        out.append(
            {
                "topology": topology,
                "profile": profile,
                "configured_loss": configured,
                "attempted": attempted,
                "a": a,
                "b": b,
                "c": c,
                "b_rate": b / handled if handled else math.nan,
                "b_low": low,
                "b_high": high,
                "b_agrees": low <= configured <= high,
            }
        )
    return out


def capture_checks(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """With --capture: loss at A, B and C from the interface counters against the same from
    the captures, per target, and the interface-to-interface one-way delay."""
    out = []
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.get("cap_sender") not in (None, ""):
            groups.setdefault((r["topology"], r["profile"]), []).append(r)
    for (topology, profile), group in sorted(groups.items()):
        row: dict[str, Any] = {"topology": topology, "profile": profile, "bursts": len(group)}
        for point in ("a", "b", "c"):
            row[f"counters_{point}"] = sum(int(r[point]) for r in group)
            row[f"captures_{point}"] = sum(int(r[f"cap_{point}"]) for r in group)
        row["tcpdump_dropped"] = sum(int(r.get("cap_dropped") or 0) for r in group)
        delays = [
            float(r["if_owd_mean_us"]) for r in group if r.get("if_owd_mean_us") not in (None, "")
        ]
        app = [float(r["owd_mean_us"]) for r in group if r.get("owd_mean_us") not in (None, "")]
        row["if_owd_mean_us"] = sum(delays) / len(delays) if delays else None
        row["app_owd_mean_us"] = sum(app) / len(app) if app else None
        out.append(row)
    return out


def tables(folder: Path, rows: list[dict[str, Any]], threshold_pct: float) -> dict[str, Any]:
    """Writes bursts.csv, points.csv, receivers.csv, knees.csv, loss-check.csv; returns them."""
    write_csv(folder / "bursts.csv", rows, BURST_COLUMNS)
    points = stats.points(rows)
    write_csv(folder / "points.csv", points)
    receivers = stats.receivers(rows)
    write_csv(folder / "receivers.csv", receivers)
    knees = stats.knees(points, threshold_pct)
    write_csv(folder / "knees.csv", knees)
    checks = loss_checks(rows)
    write_csv(folder / "loss-check.csv", checks)
    captured = capture_checks(rows)
    if captured:
        write_csv(folder / "capture-check.csv", captured)
    return {
        "points": points, "receivers": receivers, "knees": knees, "loss_checks": checks,
        "capture_checks": captured,
    }  # fmt: skip


def host_facts() -> dict[str, Any]:
    import os

    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "hostname": platform.node(),
    }


def run(
    settings: Settings,
    folder: Path,
    *,
    targets: list[Target],
    progress: Progress,
    store: str | None = None,
) -> Outcome:
    """Measures every target, writes the tables, plots and report into FOLDER."""
    from nestbed.backend import get as get_backend
    from nestbed.studies.calibrate import measure, report

    get_backend().require_ready()
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time()
    rows: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}
    tuned = settings.tune_host and "tuned" in settings.profiles

    def write_manifest() -> dict[str, Any]:
        manifest = {
            "settings": settings.to_json(),
            "targets": [
                {
                    "key": t.key,
                    "experiment": t.experiment.name,
                    "sender": t.sender,
                    "receivers": list(t.receivers),
                    "link": t.link,
                    "multicast": t.multicast,
                }
                for t in targets
            ],
            "host": host_facts(),
            "facts": facts,
            "started": started,
            "duration_s": time.time() - started,
            "complete": len(facts) == len(targets),
        }
        (folder / "calibration.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest

    try:
        for t in targets:
            host = HOST_TUNING if (tuned and t.profile == "tuned") else {}
            with measure.host_sysctls(host):
                in_effect = measure.read_host(tuple(HOST_TUNING))
                got, facts[t.key] = measure.calibrate_target(
                    t, settings, folder, progress, store=store
                )
                facts[t.key]["host_sysctls"] = in_effect
            rows += got
    except BaseException:
        # A calibration that fails or is interrupted keeps what it measured, and its report.
        write_manifest()
        if rows:
            tables(folder, rows, settings.threshold_pct)
            with contextlib.suppress(Exception):  # the failure being raised matters more
                report.write(folder)
        raise
    manifest = write_manifest()
    out = tables(folder, rows, settings.threshold_pct)
    progress("plots and report", 0)
    path = report.write(folder)
    summary = {
        "duration_s": manifest["duration_s"],
        "loss_checks": out["loss_checks"],
        "capture_checks": out["capture_checks"],
        "bursts": len(
            {(r["topology"], r["profile"], r["size"], r["burst"], r["rep"]) for r in rows}
        ),
    }
    return Outcome(folder=folder, report=path, knees=out["knees"], summary=summary)


def compare(first: Path, second: Path, folder: Path) -> Path:
    """A report comparing two calibrations (two machines, or before and after a change)."""
    from nestbed.studies.calibrate import report

    for f in (first, second):
        if not (f / "points.csv").is_file():
            raise UserError(
                f"{f} is not a calibration results folder (no points.csv); give folders "
                "written by `nestbed calibrate`"
            )
    folder.mkdir(parents=True, exist_ok=True)
    return report.write_comparison(first, second, folder)
