"""`analyze` end to end on synthetic captures (tests/analysis/trace_synth.py): the three
verdicts, every capture format, truncation, unusable packets by reason, CPU availability and
the output folder. Needs the release build of nestbed-analyze (`make setup`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from trace_synth import (
    START_S,
    Scenario,
    _stall_windows,
    frame,
    records,
    simulate,
    tcp_bytes,
    write_pcap,
    write_pcapng,
)

from nestbed.analysis import analyze
from nestbed.analysis.runner import run_analyzer
from nestbed.errors import UserError

CLEAN = Scenario()
LOSSY = Scenario(loss=0.02, reno=True, rwnd=262144, wscale=4)
STALLED = Scenario(stalls=(0.02, 0.03, 0.1), size_bytes=4_000_000)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("analysis")


@pytest.fixture(scope="module")
def stalled_pcap(folder: Path) -> Path:
    return write_pcap(folder / "stalled.pcap", records(simulate(STALLED)))


def only(summary: dict) -> dict:
    assert len(summary["transfers"]) == 1, summary["transfers"]
    return summary["transfers"][0]


def test_a_clean_transfer_is_normal(folder: Path):
    s = analyze([write_pcap(folder / "clean.pcap", records(simulate(CLEAN)))], folder / "clean")
    t = only(s)
    assert t["verdict"] == "normal", t["reason"]
    e = t["evidence"]
    assert e["ratio"] > 0.9
    assert e["rtt_min_s"] == pytest.approx(0.020, abs=1e-5)
    assert e["loss_rate"] == 0 and e["capture_position"] == "sender"
    assert t["bytes"] == CLEAN.size_bytes
    assert s["unusable"] == {}


def test_drops_and_retransmissions_are_network_limited(folder: Path):
    s = analyze([write_pcap(folder / "lossy.pcap", records(simulate(LOSSY)))], folder / "lossy")
    t = only(s)
    assert t["verdict"] == "network-limited", t["reason"]
    e = t["evidence"]
    assert e["retransmitted_segments"] > 0
    assert 0.01 < e["loss_rate"] < 0.04  # 2 % drawn at random
    assert "loss rate" in t["reason"]


def test_a_sender_stalling_after_acks_with_steady_rtt_is_a_host_anomaly(stalled_pcap, folder):
    t = only(analyze([stalled_pcap], folder / "stalled"))
    assert t["verdict"] == "host anomaly", t["reason"]
    e = t["evidence"]
    assert e["ratio"] < 0.5
    assert e["rtt_inflation"] == pytest.approx(1.0, abs=0.01)  # the network never changed
    assert e["loss_rate"] == 0
    assert e["spacing_max_s"] > e["rtt_min_s"]
    assert e["idle_share"] > 0.5


def _cpu_table(path: Path, dips: bool, step: float = 0.25, shift: float = 0.0) -> Path:
    """Availability per interval: 1 minus the share of it the sender was stalled (dips; taken
    ``shift`` seconds later than the interval when shifted), or a steady 0.99."""
    windows = _stall_windows(STALLED, 1000.0)
    rows = []
    for k in range(40):
        a, b = k * step + shift, (k + 1) * step + shift
        stalled = sum(max(0.0, min(b, e) - max(a, s)) for s, e in windows)
        available = 1 - stalled / step if dips else 0.99
        rows.append({"node": "h1", "unix_s": START_S + (k + 1) * step, "interval_s": step,
                     "available": available, "longest_gap_s": 0.0, "addresses": "10.0.0.1"})  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_cpu_availability_corroborates_the_host_anomaly(stalled_pcap, folder):
    cpu = _cpu_table(folder / "cpu.csv", dips=True)
    t = only(analyze([stalled_pcap], folder / "cpu", cpu=cpu, bin_s=0.25))
    assert t["verdict"] == "host anomaly"
    c = t["evidence"]["cpu"]
    assert c["node"] == "h1" and c["available_min"] < 0.5
    assert t["evidence"]["cpu_corroborates"] is True
    # Stalls come every ~20 ms, so availability varies little from bin to bin and r is
    # modest; but it is clearly positive, and gone when the table is a second out of step.
    assert c["r_idle_unavailable"] > 0.2
    assert "corroborates" in t["reason"]
    assert (folder / "cpu" / "plots" / "cpu.png").is_file()
    shifted = _cpu_table(folder / "shifted.csv", dips=True, shift=1.0)
    t = only(analyze([stalled_pcap], folder / "shifted", cpu=shifted, bin_s=0.25))
    assert t["evidence"]["cpu"]["r_idle_unavailable"] < c["r_idle_unavailable"] - 0.2

    steady = _cpu_table(folder / "steady.csv", dips=False)
    t = only(analyze([stalled_pcap], folder / "steady", cpu=steady, bin_s=0.25))
    assert t["evidence"]["cpu_corroborates"] is False
    assert "application may have paused" in t["reason"]


def test_every_link_type_ip_version_and_format_parses(folder: Path):
    segs = simulate(Scenario(size_bytes=300_000))
    pcaps = []
    for link in ("ethernet", "sll", "sll2", "raw"):
        for v6 in (False, True):
            recs = records(segs, link=link, v6=v6)
            name = f"{link}-{'v6' if v6 else 'v4'}"
            pcaps.append(write_pcap(folder / f"{name}.pcap", recs, link=link, nanos=v6))
            pcaps.append(write_pcapng(folder / f"{name}.pcapng", recs, link=link))
    report = run_analyzer(pcaps, folder / "formats")
    assert len(report["transfers"]) == len(pcaps)
    for c, t in zip(report["captures"], report["transfers"], strict=True):
        assert c["unusable"] == {}, c["file"]
        assert c["tcp_segments"] == len(segs), c["file"]
        assert t["unique_bytes"] == 300_000, c["file"]
        assert t["ip_version"] == (6 if "-v6" in c["file"] else 4)
        assert t["rtt"]["min_s"] == pytest.approx(0.020, abs=1e-5), c["file"]


def test_snaplen_cut_captures_still_count_every_byte(folder: Path):
    segs = simulate(Scenario(size_bytes=300_000))
    cut = write_pcap(folder / "cut.pcap", records(segs), snaplen=80)
    s = analyze([cut], folder / "cut")
    assert only(s)["bytes"] == 300_000
    assert s["captures"][0]["truncated_payloads"] > 0 and s["unusable"] == {}
    # 64 bytes of an IPv6 packet behind Ethernet end inside the TCP header.
    header_cut = write_pcap(folder / "cut6.pcap", records(segs, v6=True), snaplen=64)
    s = analyze([header_cut], folder / "cut6")
    assert s["transfers"] == []
    assert s["unusable"] == {"truncated_tcp_header": len(segs)}


def test_unusable_packets_are_counted_by_reason(folder: Path):
    good = tcp_bytes(simulate(Scenario(size_bytes=3000))[3])
    udp = bytearray(good)
    udp[9] = 17
    fragment = bytearray(good)
    fragment[6] = 0x20  # more fragments
    recs = [(START_S, frame("ethernet", good)),
            (START_S + 0.1, frame("ethernet", bytes(udp))),
            (START_S + 0.2, frame("ethernet", bytes(fragment))),
            (START_S + 0.3, b"\x02" * 12 + b"\x08\x06" + b"\x00" * 28),  # ARP
            (START_S + 0.4, b"\x02" * 8),
            (START_S + 0.5, frame("ethernet", good))]  # fmt: skip
    path = write_pcap(folder / "mixed.pcap", recs)
    path.write_bytes(path.read_bytes()[:-20])  # the file ends inside its last record
    s = analyze([path], folder / "mixed")
    expected = {"not_tcp": 1, "ip_fragment": 1, "not_ip": 1, "truncated_link_header": 1,
                "truncated_record": 1}  # fmt: skip
    assert s["unusable"] == expected
    assert s["captures"][0]["tcp_segments"] == 1
    table = pd.read_csv(folder / "mixed" / "unusable.csv")
    assert dict(zip(table["reason"], table["packets"], strict=True)) == expected


def test_the_output_folder_holds_tables_plots_and_the_summary(stalled_pcap, folder):
    out = folder / "outputs"
    s = analyze([stalled_pcap, stalled_pcap], out)
    t = only(s)  # the same transfer in two captures is judged once
    assert t["also_in"] == [str(stalled_pcap)]
    assert json.loads((out / "summary.json").read_text()) == s
    for name in ("transfers.csv", "unusable.csv", "series.csv", "rtt.csv", "spacing.csv",
                 "window.csv", "report.md"):  # fmt: skip
        assert (out / name).is_file(), name
    png = b"\x89PNG\r\n\x1a\n"
    for plot in ("throughput.png", "rtt_cdf.png", "spacing_cdf.png", "window.png"):
        assert (out / "plots" / plot).read_bytes()[:8] == png, plot
    assert not (out / "plots" / "cpu.png").exists()
    rows = pd.read_csv(out / "transfers.csv")
    assert list(rows["verdict"]) == ["host anomaly"]
    series = pd.read_csv(out / "series.csv")
    assert series.groupby("transfer")["bytes"].sum().max() == STALLED.size_bytes
    assert "host anomaly" in (out / "report.md").read_text()


def test_bad_inputs_are_user_errors(folder: Path):
    with pytest.raises(UserError, match="does not exist"):
        analyze([folder / "nothing.pcap"], folder / "bad")
    text = folder / "notes.pcap"
    text.write_text("not a capture\n")
    with pytest.raises(UserError, match="not a pcap or pcapng capture"):
        analyze([text], folder / "bad")
    with pytest.raises(UserError, match="at least one capture"):
        analyze([], folder / "bad")
    cpu = folder / "cpu-bad.csv"
    cpu.write_text("node,t_s\nh1,1\n")
    pcap = write_pcap(folder / "tiny.pcap", records(simulate(Scenario(size_bytes=3000))))
    with pytest.raises(UserError, match="lacks the column"):
        analyze([pcap], folder / "bad", cpu=cpu)


def test_a_short_transfer_is_inconclusive_not_forced(folder: Path):
    pcap = write_pcap(folder / "short.pcap", records(simulate(Scenario(size_bytes=3000))))
    t = only(analyze([pcap], folder / "short"))
    assert t["verdict"] == "inconclusive" and "too short" in t["reason"]


def test_a_capture_started_mid_transfer_still_shows_the_host_anomaly(folder: Path):
    # No handshake: window scale unknown, capture position from the samples alone.
    segs = [s for s in simulate(STALLED) if s.t > 0.5]
    t = only(analyze([write_pcap(folder / "mid.pcap", records(segs))], folder / "mid"))
    assert t["verdict"] == "host anomaly", t["reason"]
    e = t["evidence"]
    assert e["window_scale_known"] is False and e["capture_position"] == "sender"


def _nearest_rank(values: list[float], p: float) -> float:
    """The nearest-rank percentile the analyzer reports (docs/analyze.md, Speed)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-p * len(ordered) // 100)))
    return ordered[int(rank) - 1]


def test_summary_percentiles_are_within_a_thousandth_of_the_samples(
    folder: Path, stalled_pcap: Path
):
    """The report's percentiles come from a log-bucketed histogram past 256 samples: within
    0.1 % of the exact ones, computed here from every sample in rtt.csv and spacing.csv;
    counts, min, max and mean are exact."""
    lossy = write_pcap(folder / "lossy-pct.pcap", records(simulate(LOSSY)))
    report = run_analyzer([stalled_pcap, lossy], folder / "percentiles", bin_s=1.0)
    checked = 0
    for name, column in (("rtt", "rtt_s"), ("spacing", "spacing_s")):
        table = pd.read_csv(folder / "percentiles" / f"{name}.csv")
        for t in report["transfers"]:
            values = table.loc[table["transfer"] == t["transfer"], column].tolist()
            stats = t[name]
            assert stats["count"] == len(values)
            if len(values) <= 256:
                continue
            checked += 1
            assert stats["min_s"] == pytest.approx(min(values), abs=1e-9)
            assert stats["max_s"] == pytest.approx(max(values), abs=1e-9)
            assert stats["mean_s"] == pytest.approx(sum(values) / len(values), rel=1e-9)
            for p in (50, 90, 99):
                exact = _nearest_rank(values, p)
                assert stats[f"p{p}_s"] == pytest.approx(exact, rel=1e-3, abs=1e-9), (name, p)
    assert checked >= 3, "no distribution large enough for the histogram"
