"""Whole runs on real namespaces: events on time, CBR and TCP traffic, programs, link events,
counters, the results folder; and what a run does with programs that fail or hang."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from nestbed.lifecycle.runs import run
from nestbed.model import Experiment
from nestbed.model.options import RunOptions
from nestbed.results.drawing import wait_drawn
from nestbed.spec import load
from nestbed.store import State, Store

pytestmark = pytest.mark.root

# a - r - b; the a-r link is shaped (so linkd carries it) and goes down from 1.0 s to 1.5 s.
NS_FILE = """\
set ns [new Simulator]
source tb_compat.tcl
$ns rtproto Static
set a [$ns node]
set r [$ns node]
set b [$ns node]
set link0 [$ns duplex-link $a $r 100Mb 5ms DropTail]
set link1 [$ns duplex-link $r $b 100Mb 0ms DropTail]
set udp0 [new Agent/UDP]
$ns attach-agent $a $udp0
set null0 [new Agent/Null]
$ns attach-agent $b $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 attach-agent $udp0
$cbr0 set packetSize_ 500
$cbr0 set rate_ 1Mb
set tcp0 [new Agent/TCP/Reno]
$ns attach-agent $b $tcp0
set sink0 [new Agent/TCPSink]
$ns attach-agent $a $sink0
$ns connect $tcp0 $sink0
set ftp0 [new Application/FTP]
$ftp0 attach-agent $tcp0
set hello [$b program-agent -command "echo hello from \\$(hostname -s 2>/dev/null || echo b); exit 3" -expected-exit-code 3]
set hang [$a program-agent -command "sleep 60" -timeout 0.5]
set noisy [$a program-agent -command "echo out; echo err >&2; exit 1"]
set flood [$a program-agent -command "head -c 70000000 /dev/zero"]
$ns at 0.2 "$cbr0 start"
$ns at 0.2 "$ftp0 start"
$ns at 0.3 "$hello start"
$ns at 0.3 "$hang start"
$ns at 0.3 "$noisy start"
$ns at 0.3 "$flood start"
$ns at 1.0 "$link0 down"
$ns at 1.5 "$link0 up"
$ns at 2.2 "$cbr0 stop"
$ns at 2.2 "$ftp0 stop"
$ns at 2.5 "$ns halt"
$ns run
"""


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _define(store: Store, tmp_path: Path, text: str = NS_FILE) -> str:
    name = f"run{os.getpid()}"
    path = tmp_path / f"{name}.ns"
    path.write_text(text)
    loaded = load(path)
    exp = loaded.experiment
    store.create_experiment(
        exp.name,
        source_text=loaded.text,
        source_format="ns",
        source_file=str(path),
        ir_json=exp.to_json(),
    )
    return exp.name


def test_a_whole_run_writes_every_table(store, testbed, tmp_path):
    name = _define(store, tmp_path)
    results = tmp_path / "results"
    summary = run(testbed, name, RunOptions(results=results))
    assert summary["outcome"] == "halted"
    assert store.get(name).state == State.SWAPPED
    assert [r.outcome for r in store.runs(name)] == ["halted"]

    manifest = json.loads((results / "manifest.json").read_text())
    assert manifest["outcome"] == "halted" and manifest["reason"] == "$ns halt"
    assert manifest["ir_sha256"] and manifest["versions"]["iperf3"].startswith("iperf 3")
    assert Experiment.from_json((results / "ir.json").read_text()).name == name

    events = _rows(results / "events.csv")
    static = [e for e in events if e["source"] == "static"]
    assert len(static) == 11
    for e in static:
        assert e["outcome"] == "ok", e
        # never early; how late is a benchmark (docs/benchmarks.md), not a test
        assert float(e["actual_s"]) >= float(e["planned_s"]) - 1e-4

    flows = {f["flow"]: f for f in _rows(results / "traffic" / "flows.csv")}
    cbr = flows["cbr0"]
    sent, received = int(cbr["packets_sent"]), int(cbr["packets_received"])
    # 1 Mb/s of 500-byte datagrams is 250 per second of the sender's planned times, from
    # its first send to its last (each as late as a loaded machine made it), over the 2 s
    # between its start and stop events, less what spawning it took.
    cbr_events = {e["verb"]: float(e["actual_s"]) for e in static if e["object"] == "cbr0"}
    sender = json.loads(next((results / "traffic" / "raw").glob("cbr0-*.send")).read_text())
    span_s = (sender["last_send_ns"] - sender["first_send_ns"]) / 1e9
    late_s = sender["lateness"]["max_ns"] / 1e9
    assert abs(sent - 1 - 250 * span_s) <= 1 + 250 * late_s
    assert cbr_events["stop"] - cbr_events["start"] - 0.3 < span_s
    # The link was down from its down event to its up event: what was sent then is lost,
    # give or take what a sender held up by a loaded machine moved into or out of the outage
    # (a sender 0.1 s late sends 25 datagrams of before the outage in it, or of it after).
    link0 = {e["verb"]: float(e["actual_s"]) for e in static if e["object"] == "link0"}
    outage_s = link0["up"] - link0["down"]
    assert abs((sent - received) - 250 * outage_s) <= 50 + 250 * late_s
    assert float(cbr["delay_mean_ms"]) >= 5.0
    series = _rows(results / "traffic" / "cbr0.csv")
    by_second = {int(float(r["t_s"])): int(r["packets"]) for r in series}
    # The down half-second, as the run applied it: second 1 carries 250 packets less those
    # sent while the link was down, by the events' own times (an event a loaded machine ran
    # late moves the outage, and a sender it held up sends its backlog there), plus 10.
    down_in_1_s = min(link0["up"], 2.0) - max(link0["down"], 1.0)
    assert by_second[1] <= 250 * (1.0 - down_in_1_s) + 10 + max(0, 200 - by_second[0])
    tcp = flows["ftp0"]
    assert int(tcp["bytes_received"]) > 100_000
    assert tcp["source"] == "b" and tcp["destination"] == "a"

    programs = {p["program"]: p for p in _rows(results / "programs.csv")}
    assert programs["hello"]["outcome"] == "ok" and programs["hello"]["exit_code"] == "3"
    assert "hello from" in (results / programs["hello"]["stdout"]).read_text()
    assert programs["hang"]["outcome"] == "timeout" and programs["hang"]["timed_out"] == "True"
    assert float(programs["hang"]["ended_s"]) - float(programs["hang"]["started_s"]) < 10
    assert programs["noisy"]["outcome"] == "failed"
    assert (results / programs["noisy"]["stderr"]).read_text() == "err\n"
    flood = (results / programs["flood"]["stdout"]).read_bytes()
    assert programs["flood"]["outcome"] == "ok"
    assert len(flood) < 70_000_000 and flood.endswith(b"more bytes of output were dropped]\n")

    counters = _rows(results / "links" / "counters.csv")
    out_of_a = [
        c for c in counters if (c["link"], c["port"], c["direction"]) == ("link0", "a", "egress")
    ]
    assert int(out_of_a[-1]["packets_out"]) >= received
    assert {r["node"] for r in _rows(results / "nodes" / "usage.csv")} == {"a", "r", "b"}

    assert wait_drawn(results)["state"] == "written"  # drawn after the run, on its own
    report = (results / "report.md").read_text()
    assert "cbr0" in report and "halted" in report
    assert (results / "plots" / "throughput.png").exists()


def test_bad_events_and_programs_do_not_stop_the_run(store, testbed, tmp_path):
    text = NS_FILE.replace('$ns at 1.0 "$link0 down"', '$ns at 1.0 "$hello start"')
    name = _define(store, tmp_path, text)
    results = tmp_path / "results"
    summary = run(testbed, name, RunOptions(results=results, duration_s=1.2))
    # the duration ends the run before the halt at 2.5 s; later events are recorded as skipped
    assert summary["outcome"] == "completed"
    events = _rows(results / "events.csv")
    again = [e for e in events if e["object"] == "hello" and e["planned_s"] == "1"]
    assert again and again[0]["outcome"] in ("ok", "error")
    skipped = [e for e in events if e["outcome"] == "skipped"]
    assert {e["object"] for e in skipped} >= {"cbr0", "ftp0", "ns"}
    assert store.get(name).state == State.SWAPPED


# One chosen packet dropped by linkd (drop-by-ordinal) in a TCP transfer of about 1 s over a
# link whose queue cannot fill in that time, captured at both ends.
# The 300th frame, well into slow start: the window then holds many segments after it, so
# the receiver's duplicate ACKs come back even if the busy host stalls the sender for a while.
ONE_DROP = """\
set ns [new Simulator]
source tb_compat.tcl
$ns rtproto Static
set a [$ns node]
set b [$ns node]
set wire [$ns duplex-link $a $b 10Mb 10ms DropTail]
$ns queue-limit $a $b 1000
nb-set-link-drop-packets $wire $a 300
set tcp [new Agent/TCP/Newreno]
$ns attach-agent $a $tcp
set sink [new Agent/TCPSink]
$ns attach-agent $b $sink
$ns connect $tcp $sink
set ftp [new Application/FTP]
$ftp attach-agent $tcp
$ns at 0.2 "$ftp start"
$ns at 1.5 "$ftp stop"
$ns at 2.0 "$ns halt"
$ns run
"""


def test_captures_give_each_tcp_segment_and_the_one_drop_linkd_made(store, testbed, tmp_path):
    name = _define(store, tmp_path, ONE_DROP)
    results = tmp_path / "results"
    run(testbed, name, RunOptions(results=results, capture=True))
    wire = [c for c in _rows(results / "links" / "counters.csv")
            if (c["link"], c["port"], c["direction"]) == ("wire", "a", "egress")]  # fmt: skip
    assert (wire[-1]["drops_other"], wire[-1]["drops_queue"]) == ("1", "0")

    from nestbed.results.seqplot import read_tcp_table

    trace = read_tcp_table(results / "tcp" / "ftp.csv")
    assert trace.unit == "byte"
    assert trace.sent_seq.size >= 200  # 1448-byte segments at 10 Mb/s for a second
    [recovery] = trace.recoveries()  # the captures see exactly linkd's drop
    # Linux recovers by fast retransmit when three duplicate ACKs come back in time; a host
    # that stalls the sender can make its tail-loss probe or timer win instead (seen on CI).
    # Either way the recovery is named by what the captures show.
    how = recovery["recovery"]
    assert how in ("fast retransmit", "timer")
    assert (recovery["duplicate_acks"] >= 3) if how == "fast retransmit" else True
    wait_drawn(results)
    assert f"1 segment dropped in the network: 1 {how}" in (results / "report.md").read_text()
    assert (results / "plots" / "tcp-ftp.png").is_file()


def test_ftp_send_delivers_exactly_what_it_was_asked_to(store, testbed, tmp_path):
    # A slow link keeps much of the transfer in flight when the sender has written its last
    # byte: all of it must still arrive and be counted.
    text = ONE_DROP.replace("nb-set-link-drop-packets $wire $a 300\n", "")
    text = text.replace("10Mb 10ms", "2Mb 50ms")
    text = text.replace(
        '$ns at 0.2 "$ftp start"\n$ns at 1.5 "$ftp stop"', '$ns at 0.2 "$ftp send 300000"'
    )
    text = text.replace('$ns at 2.0 "$ns halt"', '$ns at 3.0 "$ns halt"')
    name = _define(store, tmp_path, text)
    results = tmp_path / "results"
    run(testbed, name, RunOptions(results=results))
    [ftp] = _rows(results / "traffic" / "flows.csv")
    assert (ftp["bytes_sent"], ftp["bytes_received"]) == ("300000", "300000")
    # 300 kB at 2 Mb/s take at least 1.2 s of the link, from the transfer's start event to
    # its last byte read (the first read is no start: a receiver held up there shortens the
    # span the flow's own throughput is taken over).
    series = _rows(results / "traffic" / "ftp.csv")
    start_s = next(float(e["actual_s"]) for e in _rows(results / "events.csv")
                   if e["object"] == "ftp" and e["verb"] == "send")  # fmt: skip
    receiving_s = 300_000 * 8 / float(ftp["throughput_bps"])  # first read to last
    last_read_s = float(series[0]["t_s"]) + receiving_s
    assert 300_000 * 8 / (last_read_s - start_s) <= 2e6
    assert sum(int(r["bytes"]) for r in series) == 300_000
    assert all(float(r["t_s"]) >= 0.2 for r in series)


WHERE_FILE = """\
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set link0 [$ns duplex-link $a $b 100Mb 0ms DropTail]
set where [$a program-agent -command {read -r s < /proc/$$/stat; echo "$$ ${s##*) }"; \
ip netns identify; cat /proc/self/cgroup}]
$ns at 0.1 "$where start"
$ns at 1 "$ns halt"
$ns run
"""


def test_a_program_runs_in_its_nodes_namespace_and_cgroup_in_a_group_of_its_own(
    store, testbed, tmp_path
):
    from nestbed.backend.plan import plan

    name = _define(store, tmp_path, WHERE_FILE)
    placed = plan(load(tmp_path / f"{name}.ns").experiment)
    results = tmp_path / "results"
    assert run(testbed, name, RunOptions(results=results))["outcome"] == "halted"
    [program] = _rows(results / "programs.csv")
    assert program["outcome"] == "ok", program
    pid_line, netns, *cgroups = (results / program["stdout"]).read_text().splitlines()
    # its shell's pid, then its stat from the state on: state, ppid, process group, session
    pid, _state, _ppid, group, session, *_ = pid_line.split()
    assert pid == group == session  # a session and group of its own, so stop reaches all
    [event] = [e for e in _rows(results / "events.csv") if e["object"] == "where"]
    # the process started is the program's shell
    assert event["message"].startswith(f"pid {pid}, exec done "), event
    assert netns == placed.node("a").netns
    assert any(line.endswith(f"/nb-{placed.tag}-a") for line in cgroups), cgroups
