"""The study's pure parts: Gilbert parameters from loss rate and burst length, the sweep points,
name checks, the aggregation of delivery rows, and the report from synthetic tables."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest
from scipy import stats

from nbtest import EXAMPLES
from nestbed.errors import UserError
from nestbed.model.ir import GilbertElliott
from nestbed.spec import load
from nestbed.studies.pubsub import report, study
from nestbed.studies.pubsub.delivery import parse_shape, too_large


@pytest.mark.parametrize(("plr", "abl"), [(0.0135, 1.0), (0.0505, 1.44), (0.2, 3.0)])
def test_gilbert_parameters_give_the_loss_rate_and_burst_length(plr, abl):
    p, r = study.gilbert(plr, abl)
    assert GilbertElliott(p=p, r=r).loss_rate == pytest.approx(plr)  # stationary P(bad)
    assert 1 / r == pytest.approx(abl)  # bursts are geometric with mean 1/r


def test_gilbert_refuses_what_is_not_a_rate_or_a_burst():
    with pytest.raises(UserError, match=r"write 1\.35 % as 0\.0135"):
        study.gilbert(1.35, 2)
    with pytest.raises(UserError, match="below one packet"):
        study.gilbert(0.0135, 0.59)


def test_the_papers_printed_values_are_read_as_percent_and_at_least_one_packet():
    low, high = study.SCENARIOS["low"], study.SCENARIOS["high"]
    assert (low.plr, low.abl) == (pytest.approx(0.0135), 1.0)  # printed ABL 0.59
    assert (high.plr, high.abl) == (pytest.approx(0.0505), 1.44)
    assert study.SCENARIOS["none"].p_r == (0.0, 1.0)


def test_points_differ_only_in_the_links_loss_and_reach_the_experiment():
    settings = study.Settings.quick()
    found = study.points(settings)
    assert len(found) == 3
    varying = {k for k in found[0] if len({p[k] for p in found}) > 1}
    assert varying == {"p", "r"}
    for name, point in zip(settings.scenarios, found, strict=True):
        exp = load(EXAMPLES / "pubsub.ns", parameters=point).experiment
        (link,) = exp.links
        for port in link.ports:
            ge = port.egress.gilbert_elliott
            assert ge is not None
            assert ge.loss_rate == pytest.approx(study.SCENARIOS[name].plr, rel=1e-4)
        command = next(p.command for p in exp.programs if p.name == "publish")
        assert f"--shape {study._shape_text(settings.shape)}" in command
        assert command.startswith(sys.executable)


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"formats": ("cdr", "jsn")}, "cdr, xml-dom, xml-sax, json, yaml-full"),
        ({"compressors": ("zlib", "rar")}, "none, zlib, bzip2, lzo, zstd, lz4"),
        ({"scenarios": ("mid",)}, "none, low, high"),
        ({"qos": "fast"}, "best-effort, reliable"),
    ],
)
def test_an_unknown_name_lists_the_valid_ones(change, names):
    with pytest.raises(UserError, match="known: " + names):
        study.check(study.Settings.quick().with_(**change))


def test_the_command_refuses_an_unknown_format_before_measuring(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "nestbed", "study", "pubsub", "--formats", "cdr,jsn",
         "--results", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "unknown format 'jsn'; known: cdr," in result.stderr
    assert not (tmp_path / "r").exists()


def test_a_stream_over_the_sample_limit_is_explained():
    assert too_large(1000, limit=1000) is None
    why = too_large(1001, limit=1000)
    assert why is not None and "1001 bytes" in why and "--max-sample-bytes" in why


def test_shapes_are_five_counts():
    assert parse_shape("1,2,3,4,5").trajectory_points == 3
    with pytest.raises(UserError, match="five counts"):
        parse_shape("1,2")


def _messages(rows: list[tuple]) -> pd.DataFrame:
    """Delivery rows: (scenario, qos, format, compressor, delivery_s or None)."""
    out = []
    for scenario, qos, fmt, comp, delivery in rows:
        lost = delivery is None
        out.append({
            "scenario": scenario, "qos": qos, "format": fmt, "compressor": comp, "level": 0,
            "stream_bytes": 1000, "efficiency": 0.5, "serialize_s": 0.001, "compress_s": 0.0,
            "delivery_s": delivery, "decompress_s": None if lost else 0.0,
            "deserialize_s": None if lost else 0.002, "lost": int(lost),
        })  # fmt: skip
    return pd.DataFrame(out)


def test_delivery_rows_are_counted_and_averaged_over_delivered_messages():
    times = [0.020, 0.024, 0.031]
    rows = [("high", "best-effort", "json", "none", t) for t in times]
    rows += [("high", "best-effort", "json", "none", None)] * 2
    summary = study.summarize_delivery(_messages(rows))
    (row,) = summary.to_dict("records")
    assert (row["messages"], row["lost"], row["delivered"]) == (5, 2, 3)
    assert row["lost_fraction"] == pytest.approx(0.4)
    half = stats.t.ppf(0.975, 2) * pd.Series(times).std(ddof=1) / math.sqrt(3)
    assert row["delivery_s_mean"] == pytest.approx(sum(times) / 3)
    assert row["delivery_s_high"] - row["delivery_s_mean"] == pytest.approx(half)
    assert row["latency_s_mean"] == pytest.approx(sum(times) / 3 + 0.003)


def _local(efficiency: dict[str, float]) -> pd.DataFrame:
    rows = []
    for i, (fmt, eff) in enumerate(efficiency.items()):
        for comp, factor in (("none", 1.0), ("zlib", 3.0), ("bzip2", 4.0)):
            rows.append({
                "format": fmt, "compressor": comp, "level": 0, "n": 3,
                "efficiency_mean": eff * factor, "stream_bytes_mean": 1000 / factor,
                "serialize_s_mean": 0.001 * (i + 1),
                "deserialize_s_mean": 0.002 * (i + 1), "compress_s_mean": 0.001 * factor,
                "processing_s_mean": 0.003 * (i + 1) * factor,
            })  # fmt: skip
    return pd.DataFrame(rows)


PAPERLIKE = {"cdr": 0.95, "xml-dom": 0.07, "xml-sax": 0.07, "json": 0.11, "yaml-full": 0.09,
             "yaml-compact": 0.10}  # fmt: skip


def _finding(found: list[report.Finding], claim_start: str) -> report.Finding:
    return next(f for f in found if f.claim.startswith(claim_start))


def test_the_report_follows_the_tables_not_a_script():
    delivery = study.summarize_delivery(_messages([
        (s, "best-effort", f, c, 0.02 + 0.01 * (f != "cdr") + 0.01 * (c == "none"))
        for s in ("none", "high") for f in PAPERLIKE for c in ("none", "zlib", "bzip2")
    ]))  # fmt: skip
    found = report.findings(_local(PAPERLIKE), delivery)
    first = _finding(found, "CDR has the highest")
    assert first.verdict == "agrees" and "cdr 0.95" in first.ours
    assert _finding(found, "Among tree-based formats JSON (0.114)").verdict == "agrees"
    assert _finding(found, "Compressed, the tree-based").verdict == "differs"  # 0.33 < 0.95
    assert "LZO not measured" in _finding(found, "LZO").ours

    swapped = dict(PAPERLIKE, cdr=0.05, msgpack=2.0)
    again = report.findings(_local(swapped), delivery)
    assert _finding(again, "CDR has the highest").verdict == "differs"
    assert "msgpack 2" in _finding(again, "CDR has the highest").ours


def test_findings_without_network_data_say_so_and_the_report_renders():
    found = report.findings(_local(PAPERLIKE), pd.DataFrame())
    missing = [f for f in found if f.verdict == "not measured"]
    assert any("network runs" in f.ours for f in missing)
    text = report.render(
        settings=study.Settings.quick(), local=_local(PAPERLIKE), delivery=pd.DataFrame(),
        runs={}, figures=[], scenarios=study.SCENARIOS,
    )  # fmt: skip
    assert "| high | 5.05 | 1.44 | 0.0505 | 1.44 | 0.0369 | 0.694 | not run |" in text
    assert text.count("Paper: ") == len(report.CHECKS)
