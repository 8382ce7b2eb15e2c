"""Emulated nodes across a simulated network, for real: the example swapped in, ping and
nestbed-probe between its two hosts through ns-3's 2 Mb/s, 20 ms link, a whole run of it,
and nothing left after swap-out."""

from __future__ import annotations

import csv
import json
import os
import re
import statistics
from pathlib import Path

import pytest

from nbtest import EXAMPLES, build, swapping
from nestbed.backend import linux, sim
from nestbed.backend.plan import plan
from nestbed.binaries import probe_recv, probe_send
from nestbed.spec import load

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("simulator")]

CORE_BPS, CORE_DELAY_S = 2_000_000, 0.020
# What the simulated link carries beside each IP packet, as an emulated link does: an
# Ethernet frame on the wire (ns-3's 2-byte PPP header, then a gap for the rest).
WIRE_BYTES = 38


def _example(name: str):
    exp = load(EXAMPLES / "hybrid.ns").experiment
    return exp.model_copy(update={"name": f"{name}{os.getpid()}"})


@pytest.fixture
def swapped():
    """Swaps plans in for one test; swaps them out however it ends, and checks that nothing
    of them (namespaces, run directory, nestbed-sim) is left."""
    with swapping() as swap:
        yield swap


def _ping_rtts_ms(p, count: int = 20) -> list[float]:
    done = linux.exec_in(
        p, "h1", ["ping", "-c", str(count), "-i", "0.1", "-W", "2", "h2"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", done.stdout)]


def _expected_rtt_ms(ip_bytes: int) -> float:
    """Both ways across the core: its delay and the serialization of the packet."""
    return 2 * (CORE_DELAY_S + (ip_bytes + WIRE_BYTES) * 8 / CORE_BPS) * 1e3


def test_ping_crosses_the_simulated_link_in_twice_its_delay_and_serialization(swapped):
    p = swapped(_example("hybping"))
    rtts = _ping_rtts_ms(p)
    expected = _expected_rtt_ms(84)  # 56 bytes of ping, 8 of ICMP, 20 of IP
    print(f"RTT expected {expected:.3f} ms, min {min(rtts):.3f}, median "
          f"{statistics.median(rtts):.3f} (tolerance: never below, median within 10 %)")  # fmt: skip
    assert len(rtts) == 20
    assert min(rtts) >= expected - 0.05
    assert statistics.median(rtts) <= expected * 1.10
    lag = sim.lag((linux.run_dir(p) / sim.LOG).read_text())
    print(f"nestbed-sim worst lag {lag.worst_s * 1e3:.3f} ms, samples past 5 ms: {lag.late}")
    assert lag.per_second_s, "nestbed-sim reported no lag"


def test_a_stream_twice_the_link_rate_is_carried_at_the_link_rate(swapped, tmp_path):
    p = swapped(_example("hybrate"))
    h2 = p.node("h2")
    address = next(line.split()[0] for line in h2.hosts.splitlines() if line.endswith(" h2"))
    log = tmp_path / "recv.csv"
    receiver = linux.start_in(
        p, "h2", probe_recv(f"{address}:9000", "--idle", "2", "--log", str(log)),
        stdout=open(tmp_path / "recv.json", "w"),  # noqa: SIM115
    )  # fmt: skip
    linux.wait_listening(receiver, 9000, "udp")
    size = 1000
    sent = linux.exec_in(
        p, "h1", probe_send(f"{address}:9000", "--size", str(size), "--rate", "4M",
                            "--duration", "3"),
        capture_output=True, text=True,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert receiver.wait(timeout=30) == 0
    with log.open() as f:
        rows = list(csv.DictReader(f))
    received = [int(r["recv_ns"]) for r in rows]
    ip_bytes = size + 28
    rate_bps = (len(received) - 1) * ip_bytes * 8 / ((received[-1] - received[0]) / 1e9)
    ceiling = CORE_BPS * ip_bytes / (ip_bytes + WIRE_BYTES)
    offered = json.loads(sent.stdout)["packets_sent"]
    print(f"sent {offered} datagrams, received {len(received)}; rate "
          f"{rate_bps / 1e6:.4f} Mb/s of IP, link ceiling {ceiling / 1e6:.4f} "
          "(tolerance: at most +2 %, at least -10 %)")  # fmt: skip
    assert len(received) < 0.6 * offered  # twice the link's rate: about half is dropped
    assert rate_bps <= ceiling * 1.02
    assert rate_bps >= ceiling * 0.90
    assert min(int(r["delay_ns"]) for r in rows) >= CORE_DELAY_S * 1e9


UNSHAPED = """
routing: static
nodes: [{name: h1}, {name: h2}, {name: r1, simulated: true}, {name: r2, simulated: true},
        {name: r3, simulated: true}]
links:
  - {name: a1, members: [h1, r1], simulated: true}
  - {name: c1, members: [r1, r2], bandwidth: 10Mb, delay: 5ms, simulated: true}
  - {name: c2, members: [r2, r3], bandwidth: 10Mb, delay: 5ms, simulated: true}
  - {name: a2, members: [r3, h2], simulated: true}
"""


def test_unshaped_attachments_and_a_simulated_chain(swapped):
    exp = build(UNSHAPED).model_copy(update={"name": f"hybchain{os.getpid()}"})
    p = swapped(exp)
    assert not p.needs_linkd  # both attachments are plain veths to the simulator
    rtts = _ping_rtts_ms(p, count=10)
    expected = 2 * 2 * (0.005 + 86 * 8 / 10e6) * 1e3
    print(f"RTT expected {expected:.3f} ms, min {min(rtts):.3f}")
    assert min(rtts) >= expected - 0.05
    assert statistics.median(rtts) <= expected * 1.10 + 1.0


def _run(run_file, name: str, text: str):  # type: ignore[no-untyped-def]
    """Runs the ns file TEXT as NAME-PID; the experiment, its results folder and the cbr0
    row of its flows table."""
    ran = run_file(name, text)
    return ran.exp, ran.results, ran.flows["cbr0"]


def test_the_example_runs_end_to_end_into_a_results_folder(run_file):
    ran = run_file("hybrun", (EXAMPLES / "hybrid.ns").read_text())
    exp, results, cbr = ran.exp, ran.results, ran.flows["cbr0"]
    sent, received = int(cbr["packets_sent"]), int(cbr["packets_received"])
    # 1 Mb/s of 500-byte datagrams for 5 s, half the simulated link: it arrives (a stall of
    # the machine can bunch enough of it to overflow the 20-packet queue now and then), no
    # sooner than the link's delay and the serialization of a 528-byte packet at 2 Mb/s.
    print(f"cbr0: {received} of {sent}, mean delay {cbr['delay_mean_ms']} ms")
    assert 1200 <= sent <= 1260 and received >= 0.97 * sent
    assert float(cbr["delay_mean_ms"]) >= (CORE_DELAY_S + 530 * 8 / CORE_BPS) * 1e3
    # The simulated router's TCP transfer to h1 fills most of the core's other direction.
    ftp = ran.flows["ftp1"]
    print(f"ftp1 from simulated r2: {float(ftp['throughput_bps']) / 1e6:.3f} Mb/s")
    assert ftp["outcome"] == "ok; simulated: r2 in nestbed-sim"
    assert 0.5 * CORE_BPS < float(ftp["throughput_bps"]) <= CORE_BPS
    with (results / "simulation" / "lag.csv").open() as f:
        lag = list(csv.DictReader(f))
    assert len(lag) >= 5 and all(float(r["lag_max_s"]) >= 0 for r in lag)
    assert not linux.leftovers_by_tag().get(plan(exp).tag)


def test_events_take_an_attachment_down_and_up(run_file):
    text = (EXAMPLES / "hybrid.ns").read_text()
    text = text.replace('$ns at 6.0 "$cbr0 stop"', '$ns at 6.0 "$cbr0 stop"\n'
                        '$ns at 2.0 "$attach1 down"\n$ns at 3.0 "$attach1 up"')  # fmt: skip
    _, results, cbr = _run(run_file, "hybdown", text)
    with (results / "events.csv").open() as f:
        done = {(e["object"], e["verb"]): e["outcome"] for e in csv.DictReader(f)}
    assert done[("attach1", "down")] == done[("attach1", "up")] == "ok"
    # 5 s of CBR, 1 s of it into a link that is down
    loss = 1 - int(cbr["packets_received"]) / int(cbr["packets_sent"])
    print(f"cbr0 lost {loss:.3f} with attach1 down 1 s of 5")
    assert 0.15 < loss < 0.25


def test_cleanup_of_a_crashed_experiment_stops_its_simulator():
    """What `nestbed cleanup NAME` does for an experiment whose swap-out never came."""
    exp = build(UNSHAPED).model_copy(update={"name": f"hybclean{os.getpid()}"})
    p = plan(exp)
    linux.swap_in(p)
    pid = int((linux.run_dir(p) / sim.PID).read_text())
    try:
        assert Path(f"/proc/{pid}").exists()
        assert any("run directory" in t for t in linux.leftovers_by_tag()[p.tag])
    finally:
        removed = linux.remove_leftovers({p.tag})
    assert f"namespace {p.fabric}" in removed
    assert not Path(f"/proc/{pid}").exists(), "cleanup left nestbed-sim running"
    assert p.tag not in linux.leftovers_by_tag()


def test_linktest_passes_across_the_simulated_part(swapped):
    from nestbed.backend.linux import LinuxBackend
    from nestbed.linktest.run import linktest

    exp = _example("hyblt")
    p = swapped(exp)
    report = linktest(p, exp, 2, backend=LinuxBackend())
    routes = [c for c in report.checks if c.level == 2]
    print([(c.direction, c.link, c.verdict, c.measured) for c in routes])
    assert [c.link for c in routes] == ["attach1 core attach2", "attach2 core attach1"]
    assert all(c.verdict == "pass" for c in routes) and not report.failures
