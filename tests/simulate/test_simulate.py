"""`simulate`: real ns-2 runs turned into the results schema, checked against what the links
and traffic of each file must give (rates, serialization plus propagation delay, drops)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from sim_helpers import Simulate

from nbtest import EXAMPLES
from nestbed.errors import EnvironmentProblem, UserError
from nestbed.results.seqplot import read_tcp_table
from nestbed.results.tables import FLOW_COLUMNS, FLOW_SERIES_COLUMNS, LINK_COLUMNS
from nestbed.simulate.ns2 import Ended
from nestbed.simulate.simulation import _failure
from nestbed.simulate.trace import Converter

CBR = """
set {src} [new Agent/UDP]
$ns attach-agent ${a} ${src}
set {dst} [new Agent/Null]
$ns attach-agent ${b} ${dst}
$ns connect ${src} ${dst}
set {app} [new Application/Traffic/CBR]
${app} attach-agent ${src}
${app} set packetSize_ {size}
${app} set rate_ {rate}
"""


def cbr(app: str, a: str, b: str, size: int, rate: str) -> str:
    return CBR.format(src=f"u{app}", dst=f"n{app}", app=app, a=a, b=b, size=size, rate=rate)


def one_link(link: str, size: int, rate: str, events: str, setup: str = "") -> str:
    """Nodes a and b joined by link l (LINK: "10Mb 5ms DropTail"), SETUP (commands on them),
    CBR c0 of SIZE-byte packets at RATE from a to b, and EVENTS ($ns at lines)."""
    nodes = f"set a [$ns node]\nset b [$ns node]\nset l [$ns duplex-link $a $b {link}]\n"
    return nodes + setup.strip("\n") + "\n" + cbr("c0", "a", "b", size, rate) + events


def within(measured: float, expected: float, tolerance: float, what: str) -> None:
    """Fails with expected, measured and the tolerance (as Mininet's fidelity tests do)."""
    assert abs(measured - expected) <= tolerance, (
        f"{what}: expected {expected:.6g}, measured {measured:.6g}, tolerance {tolerance:.3g}"
    )


def flows(results: Path) -> dict[str, dict]:
    table = pd.read_csv(results / "traffic" / "flows.csv")
    assert tuple(table.columns) == FLOW_COLUMNS
    return {row["flow"]: row for row in table.to_dict("records")}


def counters(results: Path) -> pd.DataFrame:
    table = pd.read_csv(results / "links" / "counters.csv")
    assert tuple(table.columns) == LINK_COLUMNS
    return table


def last(table: pd.DataFrame, link: str, port: str, direction: str = "egress") -> pd.Series:
    rows = table[(table.link == link) & (table.port == port) & (table.direction == direction)]
    return rows.sort_values("t_s").iloc[-1]


ONE_LINK = one_link(
    "10Mb 5ms DropTail",
    1000,
    "4Mb",
    """
$ns at 1 "$c0 start"
$ns at 5 "$c0 stop"
$ns at 6 "$ns halt"
""",
)


def test_cbr_gives_its_rate_and_link_delay_plus_serialization(sim: Simulate) -> None:
    summary, results = sim(ONE_LINK)
    f = flows(results)["c0"]
    # 1000-byte packets every 2 ms from 1 s to 5 s.
    assert abs(f["packets_sent"] - 2000) <= 1
    assert f["packets_received"] == f["packets_sent"]
    assert f["loss"] == 0
    n = f["packets_received"]
    within(f["throughput_bps"], 4e6 * n / (n - 1), 1, "throughput (b/s)")
    delay_ms = 5 + 1000 * 8 / 10e6 * 1e3  # propagation + serialization
    for column in ("delay_mean_ms", "delay_p50_ms", "delay_p99_ms"):
        within(f[column], delay_ms, 0.001, column)
    assert (f["started_s"], f["ended_s"]) == (1, 5)
    series = pd.read_csv(results / "traffic" / "c0.csv")
    assert tuple(series.columns) == FLOW_SERIES_COLUMNS
    assert list(series.t_s) == [1, 2, 3, 4, 5]  # by arrival: the last ones at 5.0058 s
    full = series[series.t_s.between(2, 4)]  # whole seconds of arrivals
    assert set(full.packets) == {500} and set(full.throughput_bps) == {4_000_000}
    c = counters(results)
    assert last(c, "l", "a").packets_out == f["packets_received"]
    assert last(c, "l", "a").bytes_out == f["packets_received"] * 1000
    assert last(c, "l", "b").packets_in == 0
    assert sorted(set(c.t_s)) == [0, 1, 2, 3, 4, 5, 6]
    assert summary["outcome"] == "halted" and summary["simulated_s"] == 6
    assert summary["not_simulated"] == []


def test_delay_adds_up_over_hops_of_different_rates(sim: Simulate) -> None:
    """examples/linear.ns's topology (Netbed Figure 2) with a CBR from source to dest."""
    body = (
        """
set source [$ns node]
set router [$ns node]
set dest [$ns node]
$ns duplex-link $source $router 10Mb 0ms RED
$ns duplex-link $router $dest 1.5Mb 20ms DropTail
"""
        + cbr("c0", "source", "dest", 500, "1Mb")
        + """
$ns at 0.5 "$c0 start"
$ns at 2.5 "$c0 stop"
$ns at 3 "$ns halt"
"""
    )
    _, results = sim(body)
    f = flows(results)["c0"]
    expected_ms = (500 * 8 / 10e6 + 500 * 8 / 1.5e6 + 0.020) * 1e3
    within(f["delay_mean_ms"], expected_ms, 0.001, "one-way delay (ms)")
    # As emulation measures it: the bytes of N packets over the span of their arrivals.
    n = f["packets_received"]
    within(f["throughput_bps"], 1e6 * n / (n - 1), 1, "throughput (b/s)")
    assert f["loss"] == 0


def test_a_full_queue_drops_what_the_link_cannot_carry(sim: Simulate) -> None:
    body = one_link(
        "1Mb 10ms DropTail",
        1000,
        "2Mb",
        """
$ns at 0 "$c0 start"
$ns at 4 "$c0 stop"
$ns at 5 "$ns halt"
""",
        setup="$ns queue-limit $a $b 10",
    )
    _, results = sim(body)
    f = flows(results)["c0"]
    within(f["throughput_bps"], 1e6, 1e6 * 0.01, "throughput of a 1 Mb/s link (b/s)")
    within(f["loss"], 0.5, 0.01, "loss at twice the link's rate")
    egress = last(counters(results), "l", "a")
    assert egress.drops_queue == f["packets_sent"] - f["packets_received"]
    assert egress.drops_loss == 0 and egress.drops_other == 0
    assert egress.packets_in == egress.packets_out + egress.drops_queue + egress.queue_packets


def test_red_keeps_the_queue_near_nestbeds_thresholds_in_packets(sim: Simulate) -> None:
    """RED with nestbed's parameters (thresh 5, maxthresh 15 packets, not ns-2.35's byte-mode
    defaults): overloaded, the queue settles at maxthresh, far below the hard limit of 100."""
    body = one_link(
        "1Mb 10ms RED",
        1000,
        "2Mb",
        """
$ns at 0 "$c0 start"
$ns at 20 "$c0 stop"
$ns at 21 "$ns halt"
""",
        setup="$ns queue-limit $a $b 100",
    )
    _, results = sim(body)
    f = flows(results)["c0"]
    per_packet_ms = 8.0  # 1000 bytes at 1 Mb/s
    waiting = (f["delay_p50_ms"] - 10 - per_packet_ms) / per_packet_ms
    assert 12 <= waiting <= 17, f"median queue ahead {waiting:.1f} packets, maxthresh 15"
    within(f["loss"], 0.5, 0.01, "loss at twice the link's rate")
    c = counters(results)
    egress = c[(c.link == "l") & (c.port == "a")].set_index("t_s")
    assert egress.loc[10:20, "queue_packets"].between(10, 20).all()
    assert egress.loc[21, "drops_queue"] == f["packets_sent"] - f["packets_received"]


def test_link_down_drops_the_packets_of_its_window(sim: Simulate) -> None:
    """examples/dumbbell.ns: the bottleneck is down from 8 s to 10 s."""
    _, results = sim(EXAMPLES / "dumbbell.ns")
    series = pd.read_csv(results / "traffic" / "cbr0.csv").set_index("t_s")
    assert series.loc[9, "packets"] == 0  # nothing arrives while the link is down
    assert series.loc[7, "packets"] == 500 and series.loc[12, "packets"] == 500
    f = flows(results)["cbr0"]
    lost = f["packets_sent"] - f["packets_received"]
    within(lost, 1000, 12, "CBR packets lost in 2 s at 500 packets/s")  # + those in transit
    c = counters(results)
    bottleneck = c[(c.link == "bottleneck") & (c.port == "r1")].set_index("t_s")
    assert bottleneck.loc[8, "drops_other"] == 0
    down = bottleneck.loc[10, "drops_other"]
    assert down >= lost  # CBR and TCP packets dropped by the down link
    assert bottleneck.loc[15, "drops_other"] == down  # none once it is up again
    assert bottleneck.drops_loss.max() == 0


def test_file_loss_and_plr_events_are_simulated(sim: Simulate) -> None:
    """tb-set-link-loss (a no-op for plain ns-2) applies; `plr 0` at 3 s ends the loss."""
    body = one_link(
        "100Mb 1ms DropTail",
        100,
        "4Mb",
        """
$ns at 0 "$c0 start"
$ns at 3 "$l plr 0"
$ns at 5 "$c0 stop"
$ns at 5.1 "$ns halt"
""",
        setup="tb-set-link-loss $l 0.1",
    )
    _, results = sim(body)
    egress = counters(results)
    egress = egress[(egress.link == "l") & (egress.port == "a")].set_index("t_s")
    before = egress.loc[3, "drops_loss"]
    sent = egress.loc[3, "packets_in"]  # 5000 packets/s for 3 s
    sigma = (0.1 * 0.9 / sent) ** 0.5
    within(before / sent, 0.1, 5 * sigma, "loss probability before the plr event")
    assert egress.loc[5, "drops_loss"] == before  # plr 0: no loss after 3 s
    assert egress.drops_queue.max() == 0 and egress.drops_other.max() == 0


def test_drop_by_ordinal_drops_exactly_those_packets(sim: Simulate) -> None:
    body = one_link(
        "10Mb 1ms DropTail",
        500,
        "1Mb",
        """
$ns at 0 "$c0 start"
$ns at 1 "$c0 stop"
$ns at 1.5 "$ns halt"
""",
        setup="nb-set-link-drop-packets $l $a {3 7 1000}",
    )
    _, results = sim(body)
    f = flows(results)["c0"]
    assert f["packets_sent"] == 250  # the 1000th packet never comes
    assert f["packets_sent"] - f["packets_received"] == 2
    egress = last(counters(results), "l", "a")
    assert (egress.drops_other, egress.drops_loss, egress.drops_queue) == (2, 0, 0)


ONEDROP = EXAMPLES / "onedrop.ns"


def tcp_events(results: Path, flow: str) -> pd.DataFrame:
    return pd.read_csv(results / "tcp" / f"{flow}.csv")


@pytest.mark.parametrize(("ordinal", "segment"), [(None, 14), ("20", 19)])
def test_one_drop_is_one_drop_and_one_fast_retransmit(
    sim: Simulate, ordinal: str | None, segment: int
) -> None:
    parameters = {"drop": ordinal} if ordinal else None
    _, results = sim(ONEDROP, parameters=parameters)
    events = tcp_events(results, "ftp")
    drops = events[events.event == "drop"]
    assert list(drops.seq) == [segment]  # exactly one, the chosen segment
    sends = events[(events.event == "send") & (events.seq == segment)]
    assert len(sends) == 2  # sent, dropped, sent again
    retransmitted_at = sends.t_s.iloc[1]
    # Fast retransmit: three duplicate ACKs of the segment before it arrive first.
    acks = events[(events.event == "ack") & (events.t_s <= retransmitted_at)]
    assert (acks.seq == segment - 1).sum() >= 4
    assert retransmitted_at - drops.t_s.iloc[0] < 1.0  # long before any retransmission timer
    f = flows(results)["ftp"]
    assert f["retransmits"] == 1
    bottleneck = last(counters(results), "bottleneck", "r1")
    assert (bottleneck.drops_other, bottleneck.drops_loss, bottleneck.drops_queue) == (1, 0, 0)
    assert (results / "plots" / "tcp-ftp.png").is_file()
    [recovery] = read_tcp_table(results / "tcp" / "ftp.csv").recoveries()
    assert (recovery["seq"], recovery["recovery"]) == (segment, "fast retransmit")
    assert (
        "1 segment dropped in the network: 1 fast retransmit" in (results / "report.md").read_text()
    )


def test_full_tcp_counts_bytes_and_each_segment_once(sim: Simulate) -> None:
    """FullTcp numbers bytes and starts with a handshake; goodput counts data, once."""
    body = """
set a [$ns node]
set b [$ns node]
set l [$ns duplex-link $a $b 2Mb 10ms DropTail]
set t [new Agent/TCP/FullTcp]
$ns attach-agent $a $t
set s [new Agent/TCP/FullTcp]
$ns attach-agent $b $s
$ns connect $t $s
$s listen
set f [new Application/FTP]
$f attach-agent $t
$ns at 1 "$f start"
$ns at 4 "$f stop"
$ns at 5 "$ns halt"
"""
    _, results = sim(body)
    f = flows(results)["f"]
    assert f["bytes_sent"] == f["bytes_received"] > 0 and f["retransmits"] == 0
    assert f["bytes_received"] % 536 == 0  # FullTcp's default segment
    ceiling = 2e6 * 536 / (536 + 40)  # the link's rate less the headers
    assert 0.9 * ceiling < f["throughput_bps"] <= ceiling


def test_parameters_override_opt_and_template_parameters(sim: Simulate) -> None:
    body = (
        """
set opt(rate) 1Mb
$ns define-template-parameter DELAY 10ms "one-way delay"
set a [$ns node]
set b [$ns node]
set l [$ns duplex-link $a $b 10Mb $DELAY DropTail]
"""
        + cbr("c0", "a", "b", 1000, "$opt(rate)")
        + """
$ns at 0 "$c0 start"
$ns at 2 "$c0 stop"
$ns at 2.5 "$ns halt"
"""
    )
    summary, results = sim(body, parameters={"rate": "2Mb", "DELAY": "30ms", "nosuch": "1"})
    assert any("parameter 'nosuch' is given but" in w for w in summary["warnings"])
    f = flows(results)["c0"]
    within(f["throughput_bps"], 2e6, 2e6 * 0.01, "throughput with rate=2Mb (b/s)")
    within(f["delay_mean_ms"], 30.8, 0.001, "delay with DELAY=30ms (ms)")
    manifest = json.loads((results / "manifest.json").read_text())
    assert manifest["parameters"]["DELAY"] == "30ms"


def test_duration_stops_the_simulation_and_skips_later_events(sim: Simulate) -> None:
    summary, results = sim(EXAMPLES / "dumbbell.ns", duration=5)
    assert summary["outcome"] == "completed" and summary["simulated_s"] == 5
    events = pd.read_csv(results / "events.csv")
    skipped = events[events.outcome == "skipped"]
    assert set(skipped.verb) == {"down", "up", "stop", "halt"}
    assert list(counters(results).t_s.drop_duplicates())[-1] == 5


def test_without_halt_the_simulation_ends_after_the_last_event(sim: Simulate) -> None:
    body = ONE_LINK.replace('$ns at 6 "$ns halt"', "")
    summary, _ = sim(body)
    assert summary["outcome"] == "completed" and summary["simulated_s"] == 5


def test_what_ns2_cannot_simulate_is_listed(sim: Simulate) -> None:
    body = """
set a [$ns node]
set b [$ns node]
set c [$ns node]
tb-set-node-os $a FBSD45-STD
set l [$ns duplex-link $a $b 10Mb 5ms DropTail]
nb-set-link-jitter $l 2ms
set lan0 [$ns make-lan "$a $b $c" 100Mb 2ms]
set p [$b program-agent -command "ping -c 1 a"]
$ns at 1 "$p start"
$ns at 1.5 "$lan0 delay 5ms"
$ns at 1.6 "$lan0 queue-set $a limit_ 5"
$ns at 2 "$ns halt"
"""
    summary, results = sim(body)
    missing = "\n".join(summary["not_simulated"])
    for expected in ("node a: os FBSD45-STD", "program p on b", "link l, a egress: jitter 2ms",
                     "LAN lan0", "event lan0 delay", "event p start"):  # fmt: skip
        assert expected in missing
    programs = pd.read_csv(results / "programs.csv")
    assert list(programs.outcome) == ["not simulated"]
    events = pd.read_csv(results / "events.csv").set_index("object")
    assert events.loc["p", "outcome"] == "not simulated"
    assert events.loc["ns", "outcome"] == "ok"
    manifest = json.loads((results / "manifest.json").read_text())
    assert manifest["simulation"]["not_simulated"] == summary["not_simulated"]


def test_a_construct_ns2_lacks_is_one_sentence_with_the_line(sim: Simulate, tmp_path) -> None:
    body = """
set a [$ns node]
set b [$ns node]
set l [$ns duplex-link $a $b 10Mb 5ms DropTail]
$ns set-testbed-color blue
"""
    with pytest.raises(UserError) as caught:
        sim(body)
    message = str(caught.value)
    assert message.startswith("exp0.ns:7: ns-2 cannot run this file:")
    assert "set-testbed-color" in message and "\n" not in message
    manifest = json.loads((tmp_path / "run0" / "manifest.json").read_text())
    assert manifest["outcome"] == "failed"


def test_an_ns2_crash_is_reported_and_what_was_simulated_is_kept(
    sim: Simulate, tmp_path: Path
) -> None:
    """A CBR rate of 0 (an event nestbed accepts) makes ns-2 divide by zero (SIGFPE)."""
    body = ONE_LINK.replace('$ns at 5 "$c0 stop"', '$ns at 3.5 "$c0 set rate_ 0"')
    with pytest.raises(EnvironmentProblem, match=r"^ns-2 crashed \(SIGFPE\) at simulated time 3"):
        sim(body)
    results = tmp_path / "run0"
    f = flows(results)["c0"]
    assert 990 <= f["packets_received"] <= 1250  # written out every simulated second
    assert json.loads((results / "manifest.json").read_text())["outcome"] == "failed"
    assert (results / "report.md").is_file()


def test_an_event_ns2_rejects_is_named_with_its_time() -> None:
    """ns-2's own message for an event script that fails (`ns: SCRIPT: MESSAGE`)."""
    ended = Ended(1, "", 'ns: _o12 frob 3: invalid command name "frob"\n    while executing', 0.1)
    converter = Converter.__new__(Converter)
    converter.how, converter.last_t = None, 3.25
    error = _failure(Path("x.ns"), ended, converter)
    assert isinstance(error, UserError)
    assert str(error).startswith(
        "x.ns: ns-2 cannot run the event `_o12 frob 3` at simulated time 3.25 s: invalid "
        'command name "frob";'
    )


def test_a_results_folder_in_use_is_refused(sim: Simulate, tmp_path: Path) -> None:
    (tmp_path / "run0").mkdir()
    (tmp_path / "run0" / "x").write_text("")
    with pytest.raises(UserError, match="is not empty"):
        sim(ONE_LINK)
