"""Tables, report and the comparison of two calibrations, from rows as measurement makes them
(no namespaces needed)."""

from __future__ import annotations

import json
from pathlib import Path

from nestbed.studies.calibrate import compare
from nestbed.studies.calibrate.report import write
from nestbed.studies.calibrate.study import read_csv, tables


def _rows(profile: str, c_loss: dict[int, int], delay_us: float) -> list[dict]:
    rows = []
    for size, lost in c_loss.items():
        for burst in (100, 1000):
            for rep in range(3):
                attempted, received = burst, burst - min(burst, lost + rep)
                c = attempted - received
                rows.append({
                    "topology": "link", "profile": profile, "mode": "unicast", "receiver": "r1",
                    "size": size, "burst": burst, "rep": rep, "attempted": attempted,
                    "refused": 0, "sender_interface": attempted, "sender_dropped": 0,
                    "receiver_interface": attempted, "receiver_dropped": 0,
                    "received": received, "rcvbuf_errors": c, "in_errors": c, "a": 0, "b": 0,
                    "c": c, "total": c, "loss_a_pct": 0.0, "loss_b_pct": 0.0,
                    "loss_c_pct": 100 * c / attempted, "loss_total_pct": 100 * c / attempted,
                    "owd_mean_us": delay_us + rep, "owd_median_us": delay_us,
                    "owd_p99_us": delay_us, "echoes": received, "rtt_mean_us": 2 * delay_us,
                    "rtt_median_us": 2 * delay_us, "configured_loss": 0.0,
                })  # fmt: skip
    return rows


def _calibration(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir()
    (folder / "calibration.json").write_text(
        json.dumps(
            {
                "settings": {
                    "sizes": [50, 500],
                    "bursts": [100, 1000],
                    "repetitions": 3,
                    "gap_s": 0.3,
                    "threshold_pct": 1.0,
                },
                "host": {"hostname": "h", "kernel": "6", "cpus": 2},
                "facts": {
                    "link-untuned": {
                        "nodes": {"s": {"txqueuelen": 1000, "qdisc": "noqueue"}},
                        "host_sysctls": {"net.core.netdev_max_backlog": "1000"},
                    }
                },
                "duration_s": 12.0,
                "complete": True,
            }
        )
    )
    tables(folder, rows, 1.0)
    return folder


def test_the_report_has_every_plot_and_the_knee(tmp_path):
    rows = _rows("untuned", {50: 300, 500: 0}, 100.0) + _rows("tuned", {50: 0, 500: 0}, 900.0)
    folder = _calibration(tmp_path / "a", rows)
    report = write(folder).read_text()
    for name in ("loss-link-untuned", "heatmap-link-untuned", "loss-link-tuned", "delay-link"):
        assert (folder / "plots" / f"{name}.png").stat().st_size > 1000
        assert f"(plots/{name}.png)" in report
    knees = {(k["profile"], k["burst"]): k["knee_size"] for k in read_csv(folder / "knees.csv")}
    # Untuned loses small packets only (as in the paper): the knee is the next size up.
    assert knees[("untuned", 100)] == knees[("untuned", 1000)] == 500
    assert knees[("tuned", 100)] == 50
    assert "| link, untuned | 100 | 500 |" in report


def test_two_calibrations_are_compared_point_by_point(tmp_path):
    first = _calibration(tmp_path / "before", _rows("untuned", {50: 0, 500: 300}, 100.0))
    second = _calibration(tmp_path / "after", _rows("untuned", {50: 0, 500: 0}, 100.0))
    report = compare(first, second, tmp_path / "cmp").read_text()
    assert "# Calibrations compared: before and after" in report
    assert (tmp_path / "cmp" / "plots" / "comparison.png").is_file()
    # 500 B in 100-packet bursts: all lost before, none after: it differs; 50 B does not.
    line = next(x for x in report.splitlines() if x.startswith("| link | untuned | 500 | 100 |"))
    assert "yes" in line
    line = next(x for x in report.splitlines() if x.startswith("| link | untuned | 50 | 100 |"))
    assert line.split("|")[7].strip() == ""
