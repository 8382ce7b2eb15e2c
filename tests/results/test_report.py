"""The run report: report.md, plots and summary() from complete, empty and failed run folders."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from nestbed.results import report
from nestbed.results.report import human, summary, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ["throughput.png", "delay.png", "links.png", "events.png", "cpu.png"]

EVENTS = "index,source,planned_s,actual_s,error_ms,object,verb,args,outcome,message"
PROGRAMS = "program,node,command,started_s,ended_s,exit_code,expected_exit_code,timed_out,outcome,stdout,stderr"
FLOWS = "flow,kind,source,destination,started_s,ended_s,packets_sent,bytes_sent,packets_received,bytes_received,loss,throughput_bps,delay_mean_ms,delay_p50_ms,delay_p99_ms,retransmits,outcome"
SERIES = "t_s,packets,bytes,throughput_bps,delay_mean_ms,retransmits"
COUNTERS = "t_s,link,port,direction,packets_in,bytes_in,packets_out,bytes_out,drops_loss,drops_queue,drops_other,queue_packets,queue_bytes"
USAGE = "t_s,node,cpu_s,memory_bytes"
HEADERS = {
    "events.csv": EVENTS,
    "programs.csv": PROGRAMS,
    "traffic/flows.csv": FLOWS,
    "links/counters.csv": COUNTERS,
    "nodes/usage.csv": USAGE,
}

# Static timing errors 1..9 ms and one 100 ms early: |errors| sorted are 1..9, 100, so with
# linear interpolation p50 = 5.5, p99 = 9 + 0.91 × (100 − 9) = 91.81 and max = 100.
STATIC_ERRORS = [1, 2, 3, 4, 5, 6, 7, 8, 9, -100]


def write(run: Path, name: str, header: str, rows: list[str] = ()) -> None:
    path = run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header, *rows]) + "\n")


def manifest(run: Path, **changes) -> None:
    data = {
        "experiment": "dumbbell",
        "run_id": 3,
        "file": "dumbbell.ns",
        "outcome": "completed",
        "reason": None,
        "started_at": "2026-01-02T10:00:00+00:00",
        "ended_at": "2026-01-02T10:00:30+00:00",
        "duration_s": 30.2,
        "host": {"cores": 8},
    } | changes
    run.mkdir(parents=True, exist_ok=True)
    (run / "manifest.json").write_text(json.dumps(data))


@pytest.fixture
def complete(tmp_path: Path) -> Path:
    run = tmp_path / "run-3"
    manifest(run)
    events = [
        f"{i},static,{i}.0,{i + e / 1000},{e},link0,bandwidth,5Mb,ok,"
        for i, e in enumerate(STATIC_ERRORS)
    ]
    events += [
        "10,static,12.0,,,link0,down,,skipped,link already down",  # no timing: not counted
        "11,dynamic,13.0,13.5,500,link0,up,,ok,",  # dynamic: not counted
        "12,static,5.0,5.002,2,link1,down,,ok,",
    ]
    # The 2 ms of event 12 joins the static errors, so they are 1,2,2,3..9,100 (11 values):
    # p50 = 5, p99 = 9 + 0.9 × 91 = 90.9, max = 100.
    write(run, "events.csv", EVENTS, events)
    write(run, "programs.csv", PROGRAMS, [
        "server,h2,iperf3 -s,0.1,30.0,0,0,false,ok,programs/server.out,programs/server.err",
        "client,h1,iperf3 -c h2 | tee x,1.0,20.0,1,0,false,failed,programs/client.out,",
        "daemon,h1,sleep 100,0.2,30.0,-9,0,false,killed,,",
    ])  # fmt: skip
    write(run, "traffic/flows.csv", FLOWS, [
        "f1,cbr,h1,h2,0,10,1000,1250000,995,1243750,0.005,9520000,20.1,20.04,25.3,,ok",
        "f2,ftp,h3,h4,0,10,,,,,0,48700000,,,,12,ok",
    ])  # fmt: skip
    write(
        run,
        "traffic/f1.csv",
        SERIES,
        [f"{t},100,125000,{9.5e6 + t * 1e4},{20 + t / 10}," for t in range(10)],
    )
    # f2 has no throughput column: the plot falls back to bytes × 8.
    write(
        run,
        "traffic/f2.csv",
        "t_s,packets,bytes,retransmits",
        [f"{t},4000,6000000,1" for t in range(10)],
    )
    write(run, "links/counters.csv", COUNTERS, [
        "0,link0,h1,egress,0,0,0,0,0,0,0,0,0",
        "1,link0,h1,egress,0,0,1000,1250000,0,3,0,12,18000",
        "2,link0,h1,egress,0,0,2000,2500000,1,7,0,5,7500",
        "0,link0,h2,egress,0,0,0,0,0,0,0,0,0",
        "1,link0,h2,egress,0,0,10,15000,0,0,0,0,0",
        "2,link0,h2,egress,0,0,20,30000,0,0,2,1,1500",
    ])  # fmt: skip
    write(run, "nodes/usage.csv", USAGE, ["0,h1,0,1000", "1,h1,0.5,1000", "2,h1,1.5,1000"])
    return run


def is_png(path: Path) -> tuple[int, int]:
    """Width and height of a valid PNG (signature, then an IHDR chunk first)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def test_complete_report_has_every_section(complete: Path):
    path = write_report(complete)
    assert path == complete / "report.md"
    text = path.read_text()
    assert text.startswith("# dumbbell, run 3: completed\n")
    assert "- Outcome: completed\n" in text
    assert "- Started: 2026-01-02T10:00:00+00:00\n" in text
    assert "- Duration: 30.2 s\n" in text
    assert "Missing or empty" not in text
    assert (
        "| f1 | cbr | h1→h2 | 1,000 | 995 | 9.52 Mb/s | 0.5 % | 20.1 ms | 20 ms | 25.3 ms | — | ok |"
        in text
    )
    assert "| f2 | ftp | h3→h4 | — | — | 48.7 Mb/s | 0 % | — | — | — | 12 | ok |" in text
    assert (
        "Timing error of 11 static events (|actual − planned|): p50 5 ms, p99 90.9 ms, max 100 ms."
        in text
    )
    assert "| 12 | static | 5.000 s | 5.002 s | 2 ms | link1 down | ok |  |" in text
    assert "| 10 | static | 12.000 s | — | — | link0 down | skipped | link already down |" in text
    # A pipe in a command is escaped, so the table keeps its columns.
    assert (
        "| client | h1 | iperf3 -c h2 \\| tee x | 1.000 s | 20.000 s | 1 | 0 | failed | [stdout](programs/client.out) |"
        in text
    )
    assert "| daemon | h1 | sleep 100 | 0.200 s | 30.000 s | -9 | 0 | killed |  |" in text
    assert "| link0 | h1 | egress | 2,000 | 2.5 MB | 1 | 7 | 0 | 12 | 18 kB |" in text
    assert "| link0 | h2 | egress | 20 | 30 kB | 0 | 0 | 2 | 1 | 1.5 kB |" in text
    for name in PLOTS:
        assert f"(plots/{name})" in text
        assert is_png(complete / "plots" / name) == (
            (900, 600) if name == "links.png" else (900, 450)
        )


def test_summary_of_a_complete_run(complete: Path):
    s = summary(complete)
    assert (s["experiment"], s["run_id"], s["outcome"], s["reason"]) == (
        "dumbbell",
        3,
        "completed",
        None,
    )
    assert s["duration_s"] == 30.2
    assert s["flows"] == [
        {
            "flow": "f1",
            "kind": "cbr",
            "path": "h1→h2",
            "throughput_bps": 9_520_000,
            "loss": 0.005,
            "delay_mean_ms": 20.1,
        },
        {
            "flow": "f2",
            "kind": "ftp",
            "path": "h3→h4",
            "throughput_bps": 48_700_000,
            "loss": 0.0,
            "delay_mean_ms": None,
        },
    ]
    assert s["timing_ms"] == pytest.approx({"count": 11, "p50": 5.0, "p99": 90.9, "max": 100.0})
    # killed (at teardown) is neither ok nor failed.
    assert s["programs"] == {"ok": 1, "failed": 1, "total": 3}
    # The summary is plain data for `--json`.
    json.dumps(s)


def plotted(draw, run: Path) -> dict[str, list[float]]:
    """The y values of each labelled line a plot function draws on its first axes."""
    fig = Figure()
    assert draw(report._load(run), fig)
    return {
        line.get_label(): [round(float(y), 6) for y in line.get_ydata()]
        for line in fig.axes[0].lines
    }


def test_plots_show_rates_from_cumulative_counters(complete: Path):
    # 1.25 MB more each second is 10 Mb/s; the first sample has no interval before it.
    links = plotted(report._plot_links, complete)
    assert str(links["link0 h1 egress"]) == str([float("nan"), 10.0, 10.0])
    assert links["link0 h2 egress"][1:] == [0.12, 0.12]
    # cpu_s 0, 0.5, 1.5 over 1-s samples is half a core, then one core.
    assert plotted(report._plot_cpu, complete)["h1"][1:] == [0.5, 1.0]
    throughput = plotted(report._plot_throughput, complete)
    assert throughput["f1"][:2] == [9.5, 9.51]
    assert throughput["f2"] == [48.0] * 10  # bytes × 8, as the series has no throughput column
    assert plotted(report._plot_delay, complete) == {"f1": [20 + t / 10 for t in range(10)]}
    # The CDF is of the signed errors of static events: 100 ms early first.
    fig = Figure()
    report._plot_events(report._load(complete), fig)
    (cdf,) = fig.axes[0].lines
    assert list(cdf.get_xdata()) == [-100, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9]
    assert list(cdf.get_ydata()) == pytest.approx([k / 11 for k in range(1, 12)])


def test_report_is_deterministic(complete: Path):
    first = write_report(complete).read_text()
    images = {name: (complete / "plots" / name).read_bytes() for name in PLOTS}
    assert write_report(complete).read_text() == first
    assert {name: (complete / "plots" / name).read_bytes() for name in PLOTS} == images


def test_only_the_first_50_events_are_listed(tmp_path: Path):
    manifest(tmp_path)
    write(
        tmp_path, "events.csv", EVENTS, [f"{i},static,{i},{i},0.5,link0,up,,ok," for i in range(60)]
    )
    text = write_report(tmp_path).read_text()
    assert "| 49 | static |" in text and "| 50 | static |" not in text
    assert "_The first 50 of 60 events; all are in `events.csv`._" in text
    assert (
        "Timing error of 60 static events (|actual − planned|): p50 0.5 ms, p99 0.5 ms, max 0.5 ms."
        in text
    )


def test_failed_run_with_only_a_manifest(tmp_path: Path):
    manifest(tmp_path, outcome="failed", reason="tclsh not found", ended_at=None, duration_s=None)
    text = write_report(tmp_path).read_text()
    assert text.startswith("# dumbbell, run 3: failed\n")
    assert "- Outcome: failed (tclsh not found)\n" in text
    assert "- Ended: —\n- Duration: —\n" in text
    assert "_No flows: `traffic/flows.csv` is missing._" in text
    assert "_No events: `events.csv` is missing._" in text
    assert "_No programs: `programs.csv` is missing._" in text
    assert "_No link counters: `links/counters.csv` is missing._" in text
    assert "`nodes/usage.csv` (is missing)" in text
    assert "_No plots: the run recorded no series to draw._" in text
    assert not (tmp_path / "plots").exists()
    assert summary(tmp_path) == {
        "experiment": "dumbbell",
        "run_id": 3,
        "outcome": "failed",
        "reason": "tclsh not found",
        "duration_s": None,
        "flows": [],
        "timing_ms": None,
        "programs": {"ok": 0, "failed": 0, "total": 0},
    }


def test_run_with_header_only_tables(tmp_path: Path):
    manifest(tmp_path, outcome="interrupted")
    for name, header in HEADERS.items():
        write(tmp_path, name, header)
    write(tmp_path, "traffic/f1.csv", SERIES)
    text = write_report(tmp_path).read_text()
    assert "_No flows: `traffic/flows.csv` has no rows._" in text
    assert "_No events: `events.csv` has no rows._" in text
    assert "_No link counters: `links/counters.csv` has no rows._" in text
    assert "`traffic/f1.csv` (has no rows)" in text
    assert not any((tmp_path / "plots" / name).exists() for name in PLOTS)
    s = summary(tmp_path)
    assert (s["outcome"], s["flows"], s["timing_ms"]) == ("interrupted", [], None)


def test_empty_and_broken_files_do_not_raise(tmp_path: Path):
    (tmp_path / "manifest.json").write_text("{not json")
    (tmp_path / "events.csv").write_text("")
    write(tmp_path, "traffic/flows.csv", "flow,kind", ["f1,cbr"])  # most columns missing
    write(tmp_path, "nodes/usage.csv", USAGE, ["0,h1,,", "1,h1,x,"])  # no number to plot
    text = write_report(tmp_path).read_text()
    assert text.startswith("# Run report: outcome unknown\n")
    assert "`manifest.json` (is unreadable)" in text
    assert "_No events: `events.csv` has no rows._" in text
    assert "| f1 | cbr | → | — | — | — | — | — | — | — | — |  |" in text
    assert not (tmp_path / "plots").exists()
    assert summary(tmp_path)["flows"] == [
        {
            "flow": "f1",
            "kind": "cbr",
            "path": "→",
            "throughput_bps": None,
            "loss": None,
            "delay_mean_ms": None,
        }
    ]


def test_stale_plots_are_removed(complete: Path):
    write_report(complete)
    (complete / "nodes/usage.csv").unlink()
    text = write_report(complete).read_text()
    assert not (complete / "plots/cpu.png").exists() and "cpu.png" not in text
    assert (complete / "plots/throughput.png").exists()


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (9_520_000, "rate", "9.52 Mb/s"),
        (48_700_000_000, "rate", "48.7 Gb/s"),
        (999, "rate", "999 b/s"),
        (20.1, "ms", "20.1 ms"),
        (0.35, "ms", "0.35 ms"),
        (1500, "ms", "1.5 s"),
        (0.005, "percent", "0.5 %"),
        (0.0001, "percent", "0.01 %"),
        (1, "percent", "100 %"),
        (18_000, "bytes", "18 kB"),
        (1234567, "count", "1,234,567"),
        (2, "time", "2.000 s"),
        (None, "rate", "—"),
        ("", "ms", "—"),
        (float("nan"), "count", "—"),
    ],
)
def test_human_units(value, kind, text):
    assert human(value, kind) == text


def test_a_plot_of_many_links_shows_the_busiest_and_says_so(tmp_path: Path):
    manifest(tmp_path)
    header = "t_s,link,port,direction,bytes_out"
    # Link k delivers k MB each second; the 12 busiest are link08 ... link19.
    rows = [f"{t},link{k:02},a,egress,{k * t * 1_000_000}" for t in range(3) for k in range(20)]
    write(tmp_path, "links/counters.csv", header, rows)
    fig = Figure()
    assert report._plot_links(report._load(tmp_path), fig)
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels == [f"link{k:02} a egress" for k in range(8, 20)]
    assert "the 12 busiest of 20 link directions" in fig.get_suptitle()
