"""A simulated link's shaping options on real packets: emulated hosts send across a simulated
link between two simulated routers, swapped in for real, and what arrives is what the
option means on an emulated link."""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import time
from contextlib import closing
from pathlib import Path

import pytest

from nbtest import build, core_as_lan, link_ports, receiving, swapping
from nestbed.backend import linux, sim
from nestbed.binaries import probe_send

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("simulator")]

# Gilbert-Elliott loss: P(good→bad) 0.05, P(bad→good) 0.25, every packet lost in the bad
# state: 1/6 of the packets lost, in bursts of 1/0.25 = 4 on average (Bernoulli loss at the
# same rate would give bursts of 1.2).
GE_P, GE_R = 0.05, 0.25
BURSTY = f"""
routing: static
nodes: [{{name: h1}}, {{name: h2}}, {{name: r1, simulated: true}}, {{name: r2, simulated: true}}]
links:
  - {{name: a1, members: [h1, r1]}}
  - {{name: core, members: [r1, r2], bandwidth: 10Mb, delay: 2ms,
     gilbert_elliott: {{p: {GE_P}, r: {GE_R}}}}}
  - {{name: a2, members: [r2, h2]}}
"""


def _bursts(lost: list[bool]) -> list[int]:
    """The lengths of the runs of consecutive losses."""
    runs, current = [], 0
    for gone in lost:
        if gone:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs + ([current] if current else [])


def _drops(channel: sim.SimChannel, cause: str = "loss", core: str = "core") -> int:
    """What the core has dropped of what r1 sends so far, for CAUSE: as linkd's pipe, r1's
    side of the core decides as each packet arrives, before its queue and rate."""
    ports = channel.request("counters")["links"][core]["ports"]
    return ports["r1"]["egress"]["counters"]["drops"][cause]


@pytest.mark.parametrize("core", ["core", "ether"])
def test_gilbert_elliott_loss_on_a_simulated_link_comes_in_bursts(tmp_path, core):
    """On a LAN (``ether``) too: the chain is what r1 sends, as an emulated LAN member's
    egress pipe draws it."""
    text = BURSTY if core == "core" else core_as_lan(BURSTY)
    exp = build(text).model_copy(update={"name": f"i25dge{os.getpid()}"})
    count = 3000
    with swapping() as swap:
        p = swap(exp)
        # Addresses resolved on every hop first (the probes are counted from the first): one
        # echo of 20 comes back unless the chain stays bad for all of them (p < 0.001). On a
        # LAN the chain loses address requests too, and ns-3 asks again a second later.
        warm = ["ping", "-c", "20", "-i", "0.05", "-W", "2", "h2"]
        assert linux.exec_in(p, "h1", warm, capture_output=True).returncode == 0
        address, receiver, log = receiving(p, "h2", tmp_path, idle_s=3)
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            before = _drops(channel, core=core)
            sent = linux.exec_in(
                p, "h1", probe_send(f"{address}:9000", "--size", "200", "--pps", "1000",
                                    "--count", str(count)),
                capture_output=True, text=True,
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr
            assert receiver.wait(timeout=60) == 0
            drawn = _drops(channel, core=core) - before
    with log.open() as f:
        arrived = {int(row["seq"]) for row in csv.DictReader(f)}
    assert json.loads(sent.stdout)["packets_sent"] == count
    lost = [seq not in arrived for seq in range(count)]
    bursts = _bursts(lost)
    rate = sum(lost) / count
    mean_burst = sum(bursts) / len(bursts)
    stationary = GE_P / (GE_P + GE_R)
    print(f"lost {sum(lost)} of {count} ({rate:.4f}; stationary {stationary:.4f}) in "
          f"{len(bursts)} bursts of {mean_burst:.2f} on average (expected {1 / GE_R:g})")  # fmt: skip
    # The losses are the model's: r1's side of the core counted each one it drew (alone on
    # the host, exactly those; a host loaded far beyond its cores loses a few more on the
    # way, 1.5 % at a load average of 15).
    print(f"the model drew {drawn}")
    assert drawn <= sum(lost)
    # The loss fraction of 3000 packets of this chain has a standard deviation of about
    # 0.016 (its packets' states are correlated); the bursts' mean about 0.3.
    assert abs(rate - stationary) < 0.065
    assert 2.8 < mean_burst < 5.3


JITTERY = """
routing: static
nodes: [{name: h1}, {name: r1, simulated: true}, {name: r2, simulated: true}]
links:
  - {name: a1, members: [h1, r1]}
  - {name: core, members: [r1, r2], bandwidth: 1Mb, delay: 10ms, jitter: 2ms}
"""


def _between_routers(
    text: str,
    name: str,
    tmp_path: Path,
    count: int,
    arriving: int,
    *,
    to: str = "r2",
    interval_s: float = 0.01,
) -> tuple[list[tuple[int, float]], int]:
    """Swaps TEXT in as NAME and sends COUNT probes INTERVAL_S apart from simulated r1 to
    simulated TO across the core, all in simulated time; waits for ARRIVING of them (or
    5 s more). The (sequence number, one-way delay) of those that arrived, and the core's
    drops by ordinal of what r1 sent."""
    exp = build(text).model_copy(update={"name": name})
    core = next(link for link in exp.all_links if link.name in ("core", "ether"))
    address = core.port(to).ip
    log = tmp_path / "recv.csv"
    with swapping() as swap:
        p = swap(exp)
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            channel.request("udp-recv", "recv", to, 9000, sim.word(log),
                            sim.word(tmp_path / "recv.json"))  # fmt: skip
            channel.request("udp-send", "send", "r1", address, 9000, 64, repr(interval_s),
                            count, sim.word(tmp_path / "send.json"))  # fmt: skip
            while not channel.request("state", "send")["done"]:
                time.sleep(0.1)
            # The last probe is on its way for the delay and the jitter at most; the log
            # is written as probes arrive (the caller's count catches one that never does).
            for _ in range(100):
                if len(log.read_text().splitlines()) > arriving:
                    break
                time.sleep(0.05)
            dropped = _drops(channel, "ordinal", core.name)
            channel.request("stop", "recv")
    with log.open() as f:
        rows = [(int(r["seq"]), int(r["delay_ns"]) / 1e9) for r in csv.DictReader(f)]
    return rows, dropped


@pytest.mark.parametrize("lan", [False, True])
def test_jitter_on_a_simulated_link_is_linkds(tmp_path, lan):
    """Probes from simulated r1 to simulated r2, all in simulated time: each arrives after
    its frame's time on the wire and the delay, give or take uniform jitter of 2 ms, and in
    the order sent (10 ms apart, more than the jitter's span). On a LAN too, whose jitter is
    each member's egress pipe's, and whose 1 Mb/s is each member's to and from the switch:
    its frames are on the wire twice."""
    count = 500
    text = core_as_lan(JITTERY) if lan else JITTERY
    rows, _ = _between_routers(text, f"i25djit{os.getpid()}", tmp_path, count, count)
    # The first probes wait for r1 to resolve r2's address (on a LAN; a round trip of 24 ms,
    # as Linux does it: the request at once, the probes kept); the rest are the link's.
    seqs = [seq for seq, _ in rows]
    delays = [delay for seq, delay in rows if seq >= 5]
    # The probe's Ethernet frame on the wire, as linkd (a LAN's twice: to and from the switch)
    wire_s = (64 + 28 + 38) * 8 / 1e6 * (2 if lan else 1)
    base, jitter = 0.010 + wire_s, 0.002
    mean, sd = statistics.fmean(delays), statistics.stdev(delays)
    print(f"{len(rows)} of {count} arrived; delay {min(delays) * 1e3:.3f} to "
          f"{max(delays) * 1e3:.3f} ms, mean {mean * 1e3:.4f} (expected {base * 1e3:.4f}), "
          f"sd {sd * 1e3:.4f} (uniform: {jitter / math.sqrt(3) * 1e3:.4f})")  # fmt: skip
    assert len(rows) == count and seqs == sorted(seqs)
    assert base - jitter - 1e-6 <= min(delays) and max(delays) <= base + jitter + 1e-6
    # Of 495 draws: the mean's standard error 0.05 ms, the deviation's about 0.03 ms.
    assert abs(mean - base) < 0.15e-3
    assert abs(sd - jitter / math.sqrt(3)) < 0.15e-3


BUSY_LAN = """
routing: static
nodes: [{name: h1}, {name: r1, simulated: true}, {name: r2, simulated: true},
        {name: r3, simulated: true}]
lans:
  - {name: ether, members: [r1, r2, {node: r3, ingress: {delay: 10ms}}], bandwidth: 100Mb,
     delay: 2ms, queue: {limit: 200}}
links:
  - {name: a1, members: [h1, r1]}
"""


@pytest.mark.parametrize(("to", "delay_s"), [("r2", 0.002), ("r3", 0.011)])
def test_a_simulated_lan_with_a_delay_carries_thousands_of_packets_a_second(tmp_path, to, delay_s):
    """4000 probes a second across a LAN with 2 ms of delay (1 ms to the switch, 1 ms from
    it) all arrive after the delay and their frame's time on the wire to and from the switch:
    a member's frames wait for nothing but its own pipes, as on an emulated LAN (ns-3's CSMA
    channel, which simulated LANs were once, is busy for its whole delay after each frame,
    and carried fewer than 500 a second). r3's way in has 10 ms of its own."""
    count = 4000
    rows, _ = _between_routers(BUSY_LAN, f"i25dbl{os.getpid()}", tmp_path, count, count,
                               to=to, interval_s=0.00025)  # fmt: skip
    # The first probes wait for r1's address request, kept as Linux keeps them (up to 101;
    # the answer from r3 takes 13 ms, 52 probes), then go to r1's queue at once (200 long).
    missing = sorted(set(range(count)) - {seq for seq, _ in rows})
    delays = [delay for seq, delay in rows if seq >= 100]
    base = delay_s + 2 * (64 + 28 + 38) * 8 / 100e6
    print(
        f"{len(rows)} of {count} arrived (missing {missing[:10]}); from the 100th, delay "
        f"{min(delays) * 1e3:.4f} to {max(delays) * 1e3:.4f} ms (expected {base * 1e3:.4f})"
    )
    assert not missing
    # In simulated time, as the simulator's clock reads it (to the nanosecond).
    assert base - 1e-6 < min(delays) and max(delays) < base + 1e-6


@pytest.mark.parametrize("lan", [False, True])
def test_drops_by_ordinal_on_a_simulated_link(tmp_path, lan):
    """The packets r1 offers the core (a link, or a LAN) are numbered from 1, on a LAN its
    address request first, as linkd numbers every frame a pipe is offered: the 5th and 9th
    are dropped, no other (probes 4 and 8 on the link, 3 and 7 on the LAN)."""
    mine = "members: [{node: r1, egress: {drop_packets: [5, 9]}}, r2]"  # a LAN's are a member's
    text = JITTERY.replace("members: [r1, r2]", mine).replace(", jitter: 2ms", "")
    text = core_as_lan(text) if lan else text
    count = 20
    rows, dropped = _between_routers(text, f"i25dord{os.getpid()}", tmp_path, count, count - 2)
    arrived = {seq for seq, _ in rows}
    missing = sorted(set(range(count)) - arrived)
    print(f"missing probes: {missing}")
    assert dropped == 2 and missing == ([3, 7] if lan else [4, 8])


MANGLED = """
routing: static
nodes: [{name: h1}, {name: h2}, {name: h3}, {name: h4},
        {name: r1, simulated: true}, {name: r2, simulated: true}]
links:
  - {name: a1, members: [h1, r1]}
  - {name: core, members: [r1, r2], bandwidth: 10Mb, delay: 2ms, duplicate: 0.3, corrupt: 0.2}
  - {name: a2, members: [r2, h2]}
  - {name: wire, members: [h3, h4], bandwidth: 10Mb, delay: 2ms, duplicate: 0.3, corrupt: 0.2}
"""


def _know_each_other(p, link) -> None:  # type: ignore[no-untyped-def]
    """Each end of emulated LINK in swapped-in plan P gets the other's hardware address as
    a permanent neighbour entry."""
    ends = {}
    for port in link.ports:
        shown = linux.exec_in(p, port.node, ["ip", "-j", "addr"], capture_output=True)
        ends[port.node] = next(
            (iface["ifname"], iface["address"])
            for iface in json.loads(shown.stdout)
            if any(a.get("local") == port.ip for a in iface.get("addr_info", []))
        )
    a, b = link.ports
    for me, other in ((a, b), (b, a)):
        ifname, mac = ends[me.node][0], ends[other.node][1]
        known = ["ip", "neigh", "replace", other.ip, "lladdr", mac, "dev", ifname, "nud",
                 "permanent"]  # fmt: skip
        assert linux.exec_in(p, me.node, known, capture_output=True).returncode == 0


@pytest.mark.parametrize("lan", [False, True])
def test_duplication_and_corruption_on_a_simulated_link_are_linkds(tmp_path, lan):
    """2000 datagrams across a simulated link and an emulated one that duplicate 30 % and
    corrupt 20 % of what they carry: each link's counters draw those shares, and the
    receiving hosts get what linkd's do, every datagram but those corrupted without a
    duplicate (a corrupted one is discarded by its receiver's checksum; its duplicate never is
    corrupted), and duplicates of those not corrupted. On a LAN too, whose corrupted frames
    go on through its switch to the receiving member, as linkd's do."""
    text = core_as_lan(MANGLED) if lan else MANGLED
    exp = build(text).model_copy(update={"name": f"i25dmg{os.getpid()}"})
    core = "ether" if lan else "core"
    count, dup, bad = 2000, 0.3, 0.2
    found = {}
    with swapping() as swap:
        p = swap(exp)
        # ARP has no checksum: a reply whose sender address linkd corrupted would be believed,
        # and every datagram after it lost. The emulated hosts know each other's beforehand.
        wire = next(link for link in exp.links if link.name == "wire")
        _know_each_other(p, wire)
        for src, dst, link, port, far in (
            ("h1", "h2", core, "r1", "r2"),
            ("h3", "h4", "wire", "h3", "h4"),
        ):
            warm = ["ping", "-c", "20", "-i", "0.05", "-W", "2", dst]
            assert linux.exec_in(p, src, warm, capture_output=True).returncode == 0
            folder = tmp_path / link
            folder.mkdir()
            address, receiver, _ = receiving(p, dst, folder, idle_s=2)
            before = link_ports(p, link, simulated=link == core)
            sent = linux.exec_in(
                p, src, probe_send(f"{address}:9000", "--size", "200", "--pps", "1000",
                                   "--count", str(count)),
                capture_output=True, text=True,
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr
            assert receiver.wait(timeout=60) == 0
            after = link_ports(p, link, simulated=link == core)
            drawn = {key: after[port]["egress"]["counters"][key]
                     - before[port]["egress"]["counters"][key]
                     for key in ("duplicates", "corrupted")}  # fmt: skip
            # Counted as linkd counts them: what the sender sends out, duplicates among it,
            # all reaches the receiving port, corrupted or not.
            out, into = (after[end][way]["counters"][key] - before[end][way]["counters"][key]
                         for end, way, key in ((port, "egress", "packets_out"),
                                               (far, "ingress", "packets_in")))  # fmt: skip
            assert out == into, (link, out, into)
            got = json.loads((folder / "recv.json").read_text())
            found[link] = (drawn, got["packets"] - got["duplicates"], got["duplicates"])
    print(
        {
            link: f"drew {d}, {n} arrived and {dups} duplicates"
            for link, (d, n, dups) in found.items()
        }
    )
    for drawn, arrived, duplicates in found.values():
        # Binomial shares of 2000: standard deviations 0.010 (30 %), 0.009 (20 %), 0.008
        # (86 % arriving) and 0.010 (24 % duplicated and not corrupted); 5 of them allowed.
        assert abs(drawn["duplicates"] / count - dup) < 0.05
        assert abs(drawn["corrupted"] / count - bad) < 0.045
        assert abs(arrived / count - (1 - bad * (1 - dup))) < 0.04
        assert abs(duplicates / count - dup * (1 - bad)) < 0.05


TWO_ROUTER_LAN = """
routing: static
nodes: [{name: h1}, {name: r1, simulated: true}, {name: r2, simulated: true}]
lans:
  - {name: ether, members: MEMBERS}
links:
  - {name: a1, members: [h1, r1]}
"""


def test_a_frame_corrupted_on_both_halves_of_a_lan_is_discarded_once(tmp_path):
    """Once r1 and r2 know each other, r1's way to the switch and the switch's way to r2
    each start corrupting half of what they carry: a quarter of the probes arrive, and a
    frame corrupted twice is one more corrupted frame (ns-3 aborted nestbed-sim on marking
    it a second time)."""
    from nestbed.backend import simplan

    both = "[{node: r1, egress: {corrupt: 0.5}}, {node: r2, ingress: {corrupt: 0.5}}]"
    corrupting = simplan.settings(build(TWO_ROUTER_LAN.replace("MEMBERS", both)).lans[0])
    exp = build(TWO_ROUTER_LAN.replace("MEMBERS", "[r1, r2]"))
    exp = exp.model_copy(update={"name": f"i25dcc{os.getpid()}"})
    r2 = exp.lans[0].port("r2").ip
    count = 400
    with swapping() as swap:
        p = swap(exp)
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            for port, n, name in ((9000, 5, "warm"), (9001, count, "probes")):
                channel.request("udp-recv", f"r{name}", "r2", port,
                                sim.word(tmp_path / f"{name}.csv"),
                                sim.word(tmp_path / f"{name}-recv.json"))  # fmt: skip
                channel.request("udp-send", f"s{name}", "r1", r2, port, 64, "0.01", n,
                                sim.word(tmp_path / f"{name}-send.json"))  # fmt: skip
                while not channel.request("state", f"s{name}")["done"]:
                    time.sleep(0.1)
                time.sleep(0.5)  # the last probe's way
                if name == "warm":
                    channel.request(*corrupting.split())
            ports = channel.request("counters")["links"]["ether"]["ports"]
    with (tmp_path / "probes.csv").open() as f:
        arrived = len(list(csv.DictReader(f)))
    share = arrived / count
    twice = ports["r2"]["ingress"]["counters"]["corrupted"]
    print(f"{arrived} of {count} arrived ({share:.3f}; expected 0.25); the way to r2 "
          f"corrupted {twice}, half of them corrupted already")  # fmt: skip
    # Binomial, 400 probes: a standard deviation of 0.022.
    assert abs(share - 0.25) < 0.11
    assert twice > 0


SAME_RATE_LAN = """
routing: static
nodes: [{name: h1}, {name: r1, simulated: true}, {name: r2, simulated: true}]
lans:
  - {name: ether, members: [r1, {node: r2, ingress: {queue: {limit: 1}}}], bandwidth: 1Mb}
links:
  - {name: a1, members: [h1, r1]}
"""


def test_back_to_back_frames_pass_a_lan_members_one_packet_queue_at_the_same_rate(tmp_path):
    """20 probes sent faster than the LAN's 1 Mb/s wait in r1's queue and leave it back to
    back; each reaches the switch's port toward r2 (1 Mb/s too, a queue of one packet) at the
    nanosecond the one before it ends there, and finds the port free, as linkd's pipe
    would: all 20 arrive. (Counted on the wire until that nanosecond, every other one was
    dropped.)"""
    count = 20
    rows, _ = _between_routers(SAME_RATE_LAN, f"i25dsr{os.getpid()}", tmp_path, count, count,
                               interval_s=0.0001)  # fmt: skip
    missing = sorted(set(range(count)) - {seq for seq, _ in rows})
    print(f"missing probes: {missing}")
    assert not missing


LAN_RATE = """
routing: static
nodes: [{name: h1}, {name: h2}, {name: r1, simulated: true}, {name: r2, simulated: true}]
lans:
  - {name: ether, members: [r1, r2], bandwidth: 1Mb}
links:
  - {name: a1, members: [h1, r1]}
  - {name: a2, members: [r2, h2]}
"""


def test_a_bandwidth_event_sets_a_simulated_lans_rate(tmp_path):
    """A LAN slowed from 1 Mb/s to 200 kb/s by an event carries 200 kb/s (every member's
    pipes, to and from the switch), and a stream below both rates crosses the event whole,
    its members keeping their neighbours (no address request)."""
    from nestbed.backend import simplan
    from nestbed.model.events import link_after_event

    exp = build(LAN_RATE).model_copy(update={"name": f"i25dlr{os.getpid()}"})
    lan = exp.lans[0]
    slower = simplan.settings(link_after_event(lan, lan, "bandwidth", ("200kb",)))
    count = 60
    with swapping() as swap:
        p = swap(exp)
        warm = ["ping", "-c", "3", "-W", "2", "h2"]
        assert linux.exec_in(p, "h1", warm, capture_output=True).returncode == 0
        across = tmp_path / "across"
        across.mkdir()
        address, receiver, _ = receiving(p, "h2", across, idle_s=2)
        offered = link_ports(p, "ether", simulated=True)["r1"]["egress"]["counters"]
        stream = linux.start_in(
            p, "h1", probe_send(f"{address}:9000", "--size", "1000", "--pps", "20", "--count",
                                str(count)),
        )  # fmt: skip
        time.sleep(1.5)  # the event in the middle of the stream's 3 s
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            channel.request(*slower.split())
        assert stream.wait(timeout=60) == 0
        assert receiver.wait(timeout=60) == 0
        after = link_ports(p, "ether", simulated=True)["r1"]["egress"]["counters"]
        address, receiver, _ = receiving(p, "h2", tmp_path, idle_s=2)
        sent = linux.exec_in(
            p, "h1", probe_send(f"{address}:9000", "--size", "1000", "--rate", "400k",
                                "--duration", "4"),
            capture_output=True, text=True,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        assert receiver.wait(timeout=60) == 0
    whole = json.loads((across / "recv.json").read_text())["packets"]
    frames = after["packets_in"] - offered["packets_in"]
    print(f"across the event: {whole} of {count} arrived; r1 offered the LAN {frames} frames")
    assert whole == count and frames == count  # no address request
    got = json.loads((tmp_path / "recv.json").read_text())
    # Each 1000-byte datagram as an Ethernet frame on the wire, as linkd counts it.
    carried = got["rate"]["pps"] * (1000 + 28 + 38) * 8
    print(f"carried {carried / 1e3:.1f} kb/s of 200")
    assert abs(carried - 200e3) < 0.05 * 200e3
