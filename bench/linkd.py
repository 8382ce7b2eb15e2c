"""Benchmark: capacity of an unshaped emulated link against a direct veth pair, same run.

Three measurements, each the median of RUNS runs, through a plain veth pair and through
nestbed-linkd with each of its two frame I/O paths (``--io rings``: PACKET_MMAP rings while
offloads are off, the default; ``--io copy``: recvmmsg/sendmmsg), two experiments alive at
once whose runs alternate, so that both paths see the same load on the shared machine:

- 64-byte frames from trafgen (Debian's netsniff-ng: a PACKET_MMAP TX ring, one process)
  offered as fast as it can: frames per second delivered to the receiver's interface, and
  the CPU time each process spent per million frames (from /proc/PID/stat), which says where
  the ceiling is on a machine whose two cores the generator, linkd and the receiver share.
- 64-byte frames from nestbed-probe on packet rings paced at 148 800 frames/s (validate's
  generator and counter for its 100 Mb/s row): what the receiver counted, and the CPU per
  million frames of the generator, the receiver and linkd (user and system); and the same
  frames to the receiving node's own MAC and a UDP socket, whose stack work for each frame
  a veth runs in linkd's context.
- the same with nestbed-probe's sender (a UDP socket) and receiver, as in earlier runs.
- one iperf3 TCP stream with the veths' offloads off (nestbed's default for shaped links:
  linkd sees wire-sized frames) and on (linkd carries 64 KB super-frames, PACKET_VNET_HDR).
- one iperf3 TCP stream through a link declared at 1, 2.5, 5 and 10 Gb/s, made as an
  experiment's is (the back end's choice of offloads: on above 1 Gb/s, plan.keeps_offloads),
  against the same link with offloads off, as the back end set every shaped link before (and
  ``--linkd-before``'s binary, if given), runs alternating; each with linkd's default queue,
  a queue of 1000 frames, and that with 0.1 % loss set after swap-in (as an event sets it:
  linkd then cuts every super-frame): goodput after the first second against what the rate
  allows, CPU seconds per Gbit of iperf3's sender and receiver (iperf3's own figures) and of
  linkd, which say per core where the ceiling is (generator, kernel, emulator), and linkd's
  counters. ``--shaped-only`` runs these rows alone. ``--ceiling`` runs the 10 Gb/s link
  (``--ceiling-rate`` another) alone beside the same link unshaped and a direct veth pair,
  all with offloads on: where the link stops on this machine, whose limit that is, and how
  often TCP saw its segments out of order.

Needs root; trafgen is optional (its rows are skipped without it). ``--trafgen-only`` runs
the 64-byte rows of the fast generators alone (trafgen, and nestbed-probe on packet rings at
validate's 148 800 frames/s); ``--runs N`` changes RUNS; ``--linkd-before PATH`` compares the rings
path of another linkd binary instead of the copy path; ``--perf FILE`` records a profile of
linkd on the rings path (``perf``, Debian's linux-perf) during its trafgen window.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from nestbed.backend import linux
from nestbed.studies.validate import Bench

RUNS = 3
#: linkd's frame I/O paths (its ``--io``, set through NESTBED_LINKD_IO when the bench starts it).
IO_PATHS = ("copy", "rings")
WINDOW_S = 3.0
#: --perf: where to write a profile of linkd on the rings path (one trafgen window of it).
PERF_FILE: str | None = None
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _in(bench: Bench, node: str, argv: list[str]) -> str:
    return linux.exec_in(bench.plan, node, argv, capture_output=True, text=True, check=True).stdout


def _iface(bench: Bench, node: str, ip: str) -> str:
    """The interface of ``node`` that has address ``ip``."""
    for line in _in(bench, node, ["ip", "-o", "-4", "addr", "show"]).splitlines():
        fields = line.split()
        if fields[3].split("/")[0] == ip:
            return fields[1]
    raise RuntimeError(f"no interface with {ip} in {node}")


def _counter(bench: Bench, node: str, ifname: str, name: str) -> int:
    return int(_in(bench, node, ["cat", f"/sys/class/net/{ifname}/statistics/{name}"]))


def _user_system(stat: Path) -> tuple[float, float]:
    """User and system CPU seconds in a /proc ``stat`` file (a process's or a thread's)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS_PER_S, int(fields[12]) / TICKS_PER_S


def _cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` (all its threads) and its children so
    far. System time is the kernel's work on the process's behalf, which on a veth includes
    the receiving namespace's stack for the frames it sends."""
    user, system = _user_system(Path(f"/proc/{pid}/stat"))
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        u, s = _cpu_split(int(child))
        user, system = user + u, system + s
    return user, system


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) and its children so far."""
    return sum(_cpu_split(pid))


def _workers_cpu(pid: int | None) -> tuple[float, float]:
    """User and system CPU seconds of linkd's worker threads (the frame path) so far."""
    if pid is None:
        return 0.0, 0.0
    user = system = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            if (task / "comm").read_text().startswith("linkd-worker"):
                u, s = _user_system(task / "stat")
                user, system = user + u, system + s
    return user, system


def _linkd_pid(bench: Bench) -> int | None:
    if not bench.plan.needs_linkd:
        return None
    return int((linux.run_dir(bench.plan) / "linkd.pid").read_text())


def _linkd_read(bench: Bench) -> int:
    """Frames linkd has read from the link's ports so far (0 without linkd)."""
    if not bench.plan.needs_linkd:
        return 0
    ports = bench.counters()["links"]["link0"]["ports"].values()
    return sum(p["received"] for p in ports)


def trafgen_run(bench: Bench, conf: Path) -> dict[str, float]:
    """One run of trafgen flooding s → r through the unshaped link: delivered pps, the pps
    linkd read, and CPU seconds per million frames delivered.

    Unshaped: a pipe with a rate has a queue (50 frames by default), and the frames of a batch
    linkd reads late arrive in the pipe at once, so a queue limit would drop them and the
    figures would be the queue's, not the I/O path's.
    """
    if bench.plan.needs_linkd:
        bench.set_link({})
    s_ip, r_ip = bench.ir.links[0].port("s").ip, bench.receiver_ip
    s_if, r_if = _iface(bench, "s", s_ip), _iface(bench, "r", r_ip)
    # Leave the host's socket memory limits and IRQ affinities alone.
    argv = ["trafgen", "-o", s_if, "-i", str(conf), "-P", "1",
            "--no-sock-mem", "--notouch-irq", "-C"]  # fmt: skip
    # trafgen forks its sender; both go on SIGINT to the process group.
    gen = linux.start_in(bench.plan, "s", argv, stdout=subprocess.DEVNULL, start_new_session=True)
    linkd = _linkd_pid(bench)

    def sample() -> tuple[float, ...]:
        return (time.monotonic(), _counter(bench, "s", s_if, "tx_packets"),
                _counter(bench, "r", r_if, "rx_packets"), _cpu_s(gen.pid),
                _cpu_s(linkd) if linkd else 0.0, _linkd_read(bench),
                *_workers_cpu(linkd))  # fmt: skip

    try:
        time.sleep(1.0)
        before = sample()
        if PERF_FILE and linkd and bench.workdir.name == "linkd-rings":
            # A profile of linkd over the window (perf adds a little CPU of its own).
            subprocess.run(
                ["perf", "record", "-g", "-o", PERF_FILE, "-p", str(linkd), "--",
                 "sleep", str(WINDOW_S)],
                capture_output=True, check=True,
            )  # fmt: skip
        else:
            time.sleep(WINDOW_S)
        after = sample()
    finally:
        os.killpg(gen.pid, signal.SIGINT)
        gen.wait()
    seconds, sent, got, gen_cpu, linkd_cpu, read, user, system = (
        a - b for a, b in zip(after, before, strict=True)
    )
    per_mpkt = (lambda cpu: cpu / (got / 1e6)) if got else (lambda _: float("nan"))
    return {
        "linkd_user_s_per_mpkt": per_mpkt(user),
        "linkd_sys_s_per_mpkt": per_mpkt(system),
        "offered_pps": sent / seconds,
        "read_pps": read / seconds,
        "pps": got / seconds,
        "gen_cpu_s_per_mpkt": gen_cpu / (sent / 1e6) if sent else float("nan"),
        "linkd_cpu_s_per_mpkt": per_mpkt(linkd_cpu),
        "linkd_cores": linkd_cpu / seconds,
    }


def trafgen_conf(bench: Bench, directory: Path) -> Path:
    """A 60-byte UDP frame s → r (64 bytes on the wire with the FCS).

    Its destination MAC is another host's, so r's stack drops it on arrival: the receiver's
    work (which on a veth runs in the sender's context, linkd's or trafgen's) stays small and
    the figures are the link's. nestbed-probe's rows below go through r's whole stack.
    """
    s_ip, r_ip = bench.ir.links[0].port("s").ip, bench.receiver_ip
    s_mac = _in(bench, "s", ["cat", f"/sys/class/net/{_iface(bench, 's', s_ip)}/address"])
    conf = directory / "udp64.cfg"
    conf.write_text(
        f"{{ eth(da=02:00:00:00:00:01, sa={s_mac.strip()}), "
        f"ipv4(saddr={s_ip}, daddr={r_ip}, ttl=64), "
        "udp(sport=9, dport=9), fill(0, 18) }\n"
    )
    return conf


#: validate's 100 Mb/s row of 64-byte frames, in frames per second.
PACED_PPS = 148_800


def probe_ring_run(bench: Bench, to_socket: bool = False) -> dict[str, float]:
    """nestbed-probe on packet rings (validate's bandwidth generator and counter) at
    PACED_PPS through the unshaped link: frames per second counted at the receiver, frames
    lost, and CPU seconds per million frames of the generator, the receiver and linkd's
    worker threads (user, system). ``to_socket``: the frames go to the receiving node's own
    MAC and a UDP socket receives them, so its whole stack runs for each (on a veth, in the
    sending context: linkd's), where otherwise it drops them on arrival."""
    if bench.plan.needs_linkd:
        bench.set_link({})
    linkd = _linkd_pid(bench)
    send, recv = bench.rings()
    if to_socket:
        r_mac = _in(bench, "r", ["cat", f"/sys/class/net/{recv[1]}/address"]).strip()
        send, recv = [*send[:2], "--dst-mac", r_mac], []
    before = _workers_cpu(linkd)
    sent, got, _ = bench.probe(
        ["--size", "18", "--pps", str(PACED_PPS), "--duration", str(WINDOW_S), *send],
        ["--idle", "1", *recv],
    )
    user, system = (a - b for a, b in zip(_workers_cpu(linkd), before, strict=True))
    per_mpkt = (lambda cpu: cpu / (got["packets"] / 1e6)) if got["packets"] else (lambda _: 0.0)
    return {
        "sent_pps": sent["achieved_pps"],
        "pps": got["rate"]["pps"],
        "lost": sent["packets_sent"] - got["unique"],
        "gen_cpu_s_per_mpkt": per_mpkt(sent["cpu_user_s"] + sent["cpu_system_s"]),
        "recv_cpu_s_per_mpkt": per_mpkt(got["cpu_user_s"] + got["cpu_system_s"]),
        "linkd_user_s_per_mpkt": per_mpkt(user),
        "linkd_sys_s_per_mpkt": per_mpkt(system),
    }


def udp_pps(bench: Bench) -> float:
    _, got, _ = bench.probe(
        ["--size", "18", "--pps", "3000000", "--duration", "3"], ["--idle", "2"]
    )
    return got["rate"]["pps"]


def set_offloads(bench: Bench, on: bool) -> None:
    """Segmentation, checksum and receive offloads of every veth end of the experiment."""
    state = "on" if on else "off"
    for veth in bench.plan.veths:
        for end in (veth.a, veth.b):
            subprocess.run(
                ["ip", "netns", "exec", end.netns, "ethtool", "-K", end.ifname,
                 "tx", state, "tso", state, "gso", state, "gro", state],
                capture_output=True, check=True,
            )  # fmt: skip


def tcp_run(bench: Bench) -> dict[str, float]:
    """One iperf3 stream s → r: received bits per second, and linkd's CPU seconds per Gbit."""
    linux.exec_in(bench.plan, "r", ["iperf3", "-s", "-1", "-D"], check=True)
    time.sleep(0.3)
    linkd = _linkd_pid(bench)
    cpu_before = _cpu_s(linkd) if linkd else 0.0
    result = linux.exec_in(
        bench.plan, "s", ["iperf3", "-c", bench.receiver_ip, "-t", "4", "-J"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    cpu = (_cpu_s(linkd) if linkd else 0.0) - cpu_before
    received = json.loads(result.stdout)["end"]["sum_received"]
    return {
        "bps": received["bits_per_second"],
        "linkd_cpu_s_per_gbit": cpu / (received["bytes"] * 8 / 1e9),
    }


def shaped_tcp_error(bench: Bench, rate_bps: int) -> dict[str, float]:
    """One iperf3 stream through the link shaped to ``rate_bps`` (both directions, queue of
    1000 frames): goodput after the first second (slow start) against what the rate allows
    for full-sized segments, whose wire frames are the MSS plus 66 bytes of headers plus the
    Ethernet overhead of 24."""
    bench.set_link({"bandwidth": {"rate_bps": rate_bps}, "queue": {"limit": {"packets": 1000}}})
    linux.exec_in(bench.plan, "r", ["iperf3", "-s", "-1", "-D"], check=True)
    time.sleep(0.3)
    result = linux.exec_in(
        bench.plan, "s", ["iperf3", "-c", bench.receiver_ip, "-t", "5", "-O", "1", "-J"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    report = json.loads(result.stdout)
    mss = report["start"]["tcp_mss_default"]
    expected = rate_bps * mss / (mss + 66 + 24)
    got = report["end"]["sum_received"]["bits_per_second"]
    bench.set_link({})
    return {"bps": got, "expected_bps": expected, "error_pct": (got - expected) / expected * 100}


SHAPED_RATES_BPS = (1_000_000_000, 10_000_000_000)
#: Rates of the links declared as an experiment declares them (--shaped-only's rows).
DECLARED_RATES = ("1Gb", "2.5Gb", "5Gb", "10Gb")
#: What else the link is declared with (each direction): nothing (linkd's default queue, 50
#: frames without delay), a queue of 1000 frames, and that with 0.1 % loss.
VARIANTS: dict[str, dict[str, object]] = {
    "default queue": {},
    "queue 1000": {"queue": {"limit": {"packets": 1000}}},
    "queue 1000, loss 0.1 %": {
        "queue": {"limit": {"packets": 1000}},
        "loss": {"model": "bernoulli", "p": 0.001},
    },
}
TCP_SECONDS = 5


def _sender_port(bench: Bench) -> dict:
    """linkd's counters of the sending node's port (its egress pipe is the shaped one); all
    zero for a plain veth."""
    if not bench.plan.needs_linkd:
        return {"egress": {"counters": {"packets_in": 0, "drops": {"queue_full": 0, "loss": 0}}}}
    return bench.counters()["links"]["link0"]["ports"]["s"]


def _busy_ns(bench: Bench) -> int:
    """How long the sender's pipe in linkd has spent serializing (0 for a plain veth)."""
    return _sender_port(bench)["egress"]["counters"].get("busy_ns", 0)


def _tcp_counters(bench: Bench) -> dict[str, int]:
    """The sending node's TCP counters (nstat, absolute)."""
    lines = _in(bench, "s", ["nstat", "-a", "-z", "-s"]).splitlines()[1:]
    return {line.split()[0]: int(line.split()[1]) for line in lines}


def declared_tcp(bench: Bench, rate_bps: float | None = None) -> dict[str, float]:
    """One iperf3 stream s → r through the link as the experiment declared it: goodput after
    the first second against what its rate (or ``rate_bps``) allows for full-sized segments
    (MSS + 66 bytes of headers + 24 of Ethernet overhead per wire frame), and CPU seconds per
    Gbit of iperf3's sender and receiver (getrusage, as iperf3 reports them) and of linkd
    (from /proc, from the end of the first second to the end)."""
    rate_bps = rate_bps or bench.ir.links[0].ports[0].egress.bandwidth_bps
    linux.exec_in(bench.plan, "r", ["iperf3", "-s", "-1", "-D"], check=True)
    time.sleep(0.3)
    linkd = _linkd_pid(bench)
    port_before = _sender_port(bench)
    nstat_before = _tcp_counters(bench)
    argv = ["iperf3", "-c", bench.receiver_ip, "-t", str(TCP_SECONDS), "-O", "1", "-J"]
    client = linux.start_in(bench.plan, "s", argv, stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    cpu_before = _cpu_s(linkd) if linkd else 0.0
    # The link's busy share over three seconds in the middle of the stream (linkd's own
    # account of its serialization time; 0 without a rate).
    busy_before, t_before = _busy_ns(bench), time.monotonic()
    time.sleep(3.0)
    busy_share = (_busy_ns(bench) - busy_before) / 1e9 / (time.monotonic() - t_before)
    stdout, _ = client.communicate()
    cpu = (_cpu_s(linkd) if linkd else 0.0) - cpu_before
    port = _sender_port(bench)
    nstat = {k: v - nstat_before.get(k, 0) for k, v in _tcp_counters(bench).items()}
    pipe, pipe_before = port["egress"]["counters"], port_before["egress"]["counters"]
    whole_s = TCP_SECONDS + 1
    report = json.loads(stdout)
    mss = report["start"]["tcp_mss_default"]
    expected = rate_bps * mss / (mss + 66 + 24)
    received = report["end"]["sum_received"]
    # The receiver's goodput over the seconds the busy share covers (iperf3 reports each
    # second; the first, omitted, is the one before it).
    window = [i["sum"] for i in report["intervals"] if not i["sum"]["omitted"]][:3]
    window_bps = sum(w["bytes"] for w in window) * 8 / sum(w["seconds"] for w in window)
    gbit, gbps = received["bytes"] * 8 / 1e9, received["bits_per_second"] / 1e9
    # iperf3's CPU figures are shares of a core over the test: per Gbit at its goodput.
    usage = report["end"]["cpu_utilization_percent"]
    return {
        "bps": received["bits_per_second"],
        "expected_bps": expected,
        "error_pct": (received["bits_per_second"] - expected) / expected * 100,
        "sender_s_per_gbit": usage["host_total"] / 100 / gbps,
        "receiver_s_per_gbit": usage["remote_total"] / 100 / gbps,
        "linkd_s_per_gbit": cpu / gbit,
        "linkd_cores": cpu / received["seconds"],
        # Per second of the whole test: super-frames linkd cut (the binary before has no such
        # counter), and wire frames the pipe took in and dropped (queue full, loss).
        "cut_per_s": (port.get("segmented", 0) - port_before.get("segmented", 0)) / whole_s,
        "in_per_s": (pipe["packets_in"] - pipe_before["packets_in"]) / whole_s,
        "busy_pct": busy_share * 100,
        # What the link carried while busy, against the rate: the shaping's own error.
        "busy_error_pct": (window_bps / busy_share - expected) / expected * 100
        if busy_share
        else 0.0,
        "retransmits_per_s": report["end"]["sum_sent"].get("retransmits", 0) / whole_s,
        # Segments the receiver reported as received twice (DSACK): sent again for nothing.
        "spurious_per_s": nstat.get("TcpExtTCPDSACKRecvSegs", 0) / whole_s,
        "reorder_seen": nstat.get("TcpExtTCPSACKReorder", 0),
        **{
            f"{cause}_per_s": (pipe["drops"][cause] - pipe_before["drops"][cause]) / whole_s
            for cause in ("queue_full", "loss")
        },
    }


def declared_rows(linkd_before: str | None, tmp: Path) -> dict[str, dict[str, dict]]:
    """For each declared rate and variant: the link as the back end makes it ("now") against
    the same link with offloads off ("before": the back end's rule before, and linkd_before's
    binary if given), runs alternating; "rate, variant" → label → median row."""
    rows: dict[str, dict[str, dict]] = {}
    for rate in DECLARED_RATES:
        with contextlib.ExitStack() as stack:
            benches: dict[str, Bench] = {}
            for label, binary in (("before", linkd_before), ("now", None)):
                directory = tmp / f"declared-{rate}-{label}"
                directory.mkdir()
                with environment(NESTBED_LINKD=binary):
                    name = f"bench-{label}-{rate.replace('.', '')}-{os.getpid()}"
                    bench = Bench(directory, name=name, bandwidth=rate)
                    benches[label] = stack.enter_context(bench)
            set_offloads(benches["before"], False)
            time.sleep(0.3)  # linkd follows a change of offloads within 100 ms
            offloads = {label: _offloads_on(b) for label, b in benches.items()}
            rate_bps = benches["now"].ir.links[0].ports[0].egress.bandwidth_bps
            for variant, extra in VARIANTS.items():
                for bench in benches.values():
                    bench.set_link({"bandwidth": {"rate_bps": rate_bps}, **extra})
                key = f"{rate}, {variant}"
                rows[key] = alternating(benches, declared_tcp)
                for label, on in offloads.items():
                    rows[key][label]["offloads"] = on
    return rows


CEILING_RATE = "10Gb"


def ceiling_rows(tmp: Path, rate: str) -> dict[str, dict[str, float]]:
    """Where a link of ``rate`` stops on this machine: one TCP stream through a link declared
    at that rate as the back end makes it (offloads on) with a queue of 1000 frames; the same
    link with its rate removed after swap-in (linkd carrying the super-frames unshaped); and a
    direct veth pair with offloads on; runs alternating; label → median row, each against what
    the rate allows."""
    shaped = f"linkd, {rate}"
    setups = {shaped: True, "linkd, unshaped": True, "direct veth": False}
    with contextlib.ExitStack() as stack:
        benches: dict[str, Bench] = {}
        for k, (label, through) in enumerate(setups.items()):
            directory = tmp / f"ceiling-{k}"
            directory.mkdir()
            name = f"bench-ceiling{k}-{os.getpid()}"
            bench = Bench(directory, through_linkd=through, name=name, bandwidth=rate)
            benches[label] = stack.enter_context(bench)
        set_offloads(benches["direct veth"], True)
        rate_bps = benches[shaped].ir.links[0].ports[0].egress.bandwidth_bps
        queue = {"queue": {"limit": {"packets": 1000}}}
        benches[shaped].set_link({"bandwidth": {"rate_bps": rate_bps}, **queue})
        benches["linkd, unshaped"].set_link(queue)
        rows = alternating(benches, lambda b: declared_tcp(b, rate_bps))
        for label, b in benches.items():
            rows[label]["offloads"] = _offloads_on(b)
            rows[label]["shaped"] = label == shaped
    return rows


def report_ceiling(rows: dict[str, dict[str, float]], rate: str) -> None:
    print(f"\nwhere {rate} stops: one TCP stream, median of {RUNS} runs alternating, goodput "
          f"after the first second against what {rate} allows")  # fmt: skip
    print(f"{'path':<18}{'offloads':>9}{'goodput Gb/s':>14}{'allowed Gb/s':>14}{'error %':>9}"
          f"{'busy %':>8}{'busy err %':>11}{'sender s/Gbit':>15}{'receiver s/Gbit':>17}"
          f"{'linkd cores':>13}{'in/s':>10}{'full/s':>8}{'retx/s':>9}{'spurious/s':>11}"
          f"{'reorder':>9}")  # fmt: skip
    for label, t in rows.items():
        print(f"{label:<18}{'on' if t['offloads'] else 'off':>9}{t['bps'] / 1e9:>14.3f}"
              f"{t['expected_bps'] / 1e9:>14.3f}{t['error_pct']:>+9.2f}"
              f"{_busy_columns(t)}"
              f"{t['sender_s_per_gbit']:>15.3f}{t['receiver_s_per_gbit']:>17.3f}{t['linkd_cores']:>13.2f}{t['in_per_s']:>10,.0f}"
              f"{t['queue_full_per_s']:>8,.0f}{t['retransmits_per_s']:>9,.0f}"
              f"{t['spurious_per_s']:>11,.0f}{t['reorder_seen']:>9,.0f}")  # fmt: skip
    print("(busy %: the share of three seconds mid-stream the shaped link spent serializing,"
          " by linkd's account; busy err %: the receiver's goodput over those seconds divided by"
          " that share, against what the rate allows: the shaping's error apart from the time"
          " TCP left the link idle;")  # fmt: skip
    print(" in/s, full/s: the sender's pipe in linkd, packets taken in a second (a super-frame"
          " taken whole is one) and wire frames a full queue dropped; retx/s: segments TCP sent"
          " again, spurious/s those the receiver already had (DSACK); reorder: times the"
          " sender saw segments arrive out of order; medians)")  # fmt: skip


def _busy_columns(row: dict[str, float]) -> str:
    """The busy % and busy error columns of a row; dashes where the link has no rate (it is
    never busy, and its error has no meaning)."""
    if not row["shaped"]:
        return f"{'-':>8}{'-':>11}"
    return f"{row['busy_pct']:>8.2f}{row['busy_error_pct']:>+11.2f}"


def _offloads_on(bench: Bench) -> bool:
    """Whether the sender's interface on the link has TCP segmentation offload on."""
    ifname = bench.plan.interfaces()[("link0", "s")]
    features = _in(bench, "s", ["ethtool", "-k", ifname])
    return "tcp-segmentation-offload: on" in features


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def alternating(
    benches: dict[str, Bench], run: Callable[[Bench], dict[str, float]]
) -> dict[str, dict[str, float]]:
    """The median of RUNS runs of ``run`` on each bench, the benches taking turns."""
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in benches}
    for _ in range(RUNS):
        for label, bench in benches.items():
            runs[label].append(run(bench))
    return {label: median_of(r) for label, r in runs.items()}


def measure(benches: dict[str, Bench], trafgen_only: bool) -> dict[str, dict]:
    """Every row for every bench (label → row), runs alternating between the benches."""
    rows: dict[str, dict] = {label: {} for label in benches}

    def put(key: str, values: dict[str, object]) -> None:
        for label, value in values.items():
            rows[label][key] = value

    if shutil.which("trafgen"):
        confs = {id(b): trafgen_conf(b, b.workdir) for b in benches.values()}
        put("trafgen", alternating(benches, lambda b: trafgen_run(b, confs[id(b)])))
    put("probe_ring", alternating(benches, probe_ring_run))
    put("probe_ring_socket", alternating(benches, lambda b: probe_ring_run(b, to_socket=True)))
    if trafgen_only:
        return rows
    put("probe_pps", alternating(benches, lambda b: {"pps": udp_pps(b)}))
    for on in (False, True):
        for bench in benches.values():
            set_offloads(bench, on)
        put(f"tcp_offloads_{'on' if on else 'off'}", alternating(benches, tcp_run))
    shaped = {label: b for label, b in benches.items() if b.plan.needs_linkd}
    for rate in SHAPED_RATES_BPS:
        put(f"shaped_{rate}", alternating(shaped, lambda b, r=rate: shaped_tcp_error(b, r)))
    put("lateness", {label: b.counters()["threads"] for label, b in shaped.items()})
    return rows


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """Processes started inside (linkd among them) see ``values`` in their environment
    (None: as it is), e.g. NESTBED_LINKD_IO, the frame I/O path, or NESTBED_LINKD, the binary."""
    old = {key: os.environ.get(key) for key in values}
    for key, value in values.items():
        if value is not None:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    global RUNS, PERF_FILE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--trafgen-only", action="store_true")
    parser.add_argument(
        "--linkd-before", metavar="PATH",
        help="compare the rings path with this linkd binary's (runs alternating) "
        "instead of with the copy path",
    )  # fmt: skip
    parser.add_argument(
        "--perf", metavar="FILE", help="perf record linkd (rings) in its trafgen window"
    )
    parser.add_argument(
        "--ceiling", action="store_true",
        help="only TCP through a link declared at 10 Gb/s, shaped and unshaped, beside a "
        "direct veth, all with offloads on: where 10 Gb/s stops on this machine",
    )  # fmt: skip
    parser.add_argument(
        "--ceiling-rate",
        default=CEILING_RATE,
        metavar="RATE",
        help=f"the rate of --ceiling's shaped link (default {CEILING_RATE})",
    )
    parser.add_argument(
        "--shaped-only", action="store_true",
        help="only TCP through links declared at 1, 2.5, 5 and 10 Gb/s, as the back end "
        "makes them against offloads off",
    )  # fmt: skip
    args = parser.parse_args()
    RUNS, PERF_FILE = args.runs, args.perf
    if args.ceiling:
        with tempfile.TemporaryDirectory() as tmp:
            report_ceiling(ceiling_rows(Path(tmp), args.ceiling_rate), args.ceiling_rate)
        return
    if args.shaped_only:
        with tempfile.TemporaryDirectory() as tmp:
            declared = declared_rows(args.linkd_before, Path(tmp))
        report_declared(declared)
        return
    # label, frame I/O path (None: a plain veth), linkd binary (None: this checkout's)
    setups: list[tuple[str, str | None, str | None]] = [("direct veth", None, None)]
    if args.linkd_before:
        setups += [
            ("linkd rings before", "rings", args.linkd_before),
            ("linkd rings", "rings", None),
        ]
    else:
        setups += [(f"linkd {p}", p, None) for p in IO_PATHS]
    declared: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if not args.trafgen_only:
            declared = declared_rows(args.linkd_before, Path(tmp))
        benches: dict[str, Bench] = {}
        for label, path, binary in setups:
            directory = Path(tmp) / label.replace(" ", "-")
            directory.mkdir()
            with environment(NESTBED_LINKD_IO=path or "copy", NESTBED_LINKD=binary):
                name = f"bench-{label.removeprefix('linkd ').replace(' ', '-')}-{os.getpid()}"
                bench = Bench(directory, through_linkd=path is not None, name=name)
                benches[label] = stack.enter_context(bench)
        rows = measure(benches, args.trafgen_only)
    report(rows)
    if declared:
        report_declared(declared)


def report_declared(declared: dict[str, dict[str, dict]]) -> None:
    print(f"\none TCP stream through a link declared at each rate, median of {RUNS} runs "
          "alternating; 'before': offloads off, as the back end set every shaped link")  # fmt: skip
    print("(s/Gbit: CPU seconds per Gbit of goodput; per s, linkd's counters of the sender's "
          "pipe per second of test: super-frames cut, packets in (a super-frame taken whole "
          "is one), wire frames dropped by a full queue and by loss)")  # fmt: skip
    print(f"{'rate, declared with':<32}{'path':<7}{'offloads':>9}{'goodput Gb/s':>14}"
          f"{'allowed Gb/s':>14}{'error %':>9}{'sender s/Gbit':>15}{'receiver s/Gbit':>17}"
          f"{'linkd s/Gbit':>14}{'linkd cores':>13}{'cut/s':>9}{'in/s':>10}"
          f"{'full/s':>8}{'lost/s':>8}")  # fmt: skip
    for key, by_label in declared.items():
        for label, t in by_label.items():
            state = "on" if t["offloads"] else "off"
            print(f"{key:<32}{label:<7}{state:>9}{t['bps'] / 1e9:>14.3f}"
                  f"{t['expected_bps'] / 1e9:>14.3f}{t['error_pct']:>+9.2f}"
                  f"{t['sender_s_per_gbit']:>15.3f}{t['receiver_s_per_gbit']:>17.3f}"
                  f"{t['linkd_s_per_gbit']:>14.3f}{t['linkd_cores']:>13.2f}"
                  f"{t['cut_per_s']:>9,.0f}{t['in_per_s']:>10,.0f}"
                  f"{t['queue_full_per_s']:>8,.0f}{t['loss_per_s']:>8,.0f}")  # fmt: skip


def report(rows: dict[str, dict]) -> None:
    base = rows["direct veth"]
    print(f"link capacity, median of {RUNS} runs, linkd's two I/O paths alternating")
    if "trafgen" in base:
        print("\n64-byte frames from trafgen (one process), delivered to the receiver's interface")
        print(f"{'path':<20}{'offered pps':>13}{'linkd read pps':>16}{'delivered pps':>15}"
              f"{'× direct':>10}{'gen CPU s/Mpkt':>16}{'linkd CPU s/Mpkt':>18}"
              f"{'user':>7}{'sys':>7}{'linkd cores':>13}")  # fmt: skip
        for label, row in rows.items():
            t = row["trafgen"]
            print(f"{label:<20}{t['offered_pps']:>13,.0f}{t['read_pps']:>16,.0f}{t['pps']:>15,.0f}"
                  f"{t['pps'] / base['trafgen']['pps']:>10.2f}{t['gen_cpu_s_per_mpkt']:>16.3f}"
                  f"{t['linkd_cpu_s_per_mpkt']:>18.3f}{t['linkd_user_s_per_mpkt']:>7.3f}"
                  f"{t['linkd_sys_s_per_mpkt']:>7.3f}{t['linkd_cores']:>13.2f}")  # fmt: skip
        print("(user, sys: linkd's worker threads' user and system CPU-s per million frames)")
        for other in ("linkd copy", "linkd rings before"):
            if other in rows:
                rings, was = rows["linkd rings"]["trafgen"], rows[other]["trafgen"]
                print(f"rings / {other.removeprefix('linkd ')}: linkd CPU per frame "
                      f"{rings['linkd_cpu_s_per_mpkt'] / was['linkd_cpu_s_per_mpkt']:.2f}, "
                      f"delivered pps {rings['pps'] / was['pps']:.2f}")  # fmt: skip
    print(f"\n64-byte frames from nestbed-probe's rings at {PACED_PPS:,} frames/s (validate's "
          "100 Mb/s row)")  # fmt: skip
    print(f"{'path':<20}{'sent pps':>10}{'counted pps':>13}{'lost':>8}{'gen CPU s/Mpkt':>16}"
          f"{'recv CPU s/Mpkt':>17}{'linkd user':>12}{'linkd sys':>11}")  # fmt: skip
    for key, receiver in (("probe_ring", "ring, another MAC"), ("probe_ring_socket", "UDP socket")):
        print(f"receiver: {receiver}")
        for label, row in rows.items():
            t = row[key]
            cpu = (t["gen_cpu_s_per_mpkt"], t["recv_cpu_s_per_mpkt"],
                   t["linkd_user_s_per_mpkt"], t["linkd_sys_s_per_mpkt"])  # fmt: skip
            print(f"{label:<20}{t['sent_pps']:>10,.0f}{t['pps']:>13,.0f}{t['lost']:>8,.0f}"
                  f"{cpu[0]:>16.3f}{cpu[1]:>17.3f}{cpu[2]:>12.3f}{cpu[3]:>11.3f}")  # fmt: skip
    if "probe_pps" not in base:
        return
    print("\n64-byte UDP from nestbed-probe (sender and receiver through the whole stack)")
    print(f"{'path':<16}{'probe pps':>12}{'× direct':>10}")
    for label, row in rows.items():
        pps = row["probe_pps"]["pps"]
        print(f"{label:<16}{pps:>12,.0f}{pps / base['probe_pps']['pps']:>10.2f}")
    print("\none TCP stream (iperf3), veth offloads off and on")
    print(f"{'path':<16}{'offloads':>9}{'Gb/s':>8}{'× direct':>10}{'linkd CPU s/Gbit':>18}")
    for label, row in rows.items():
        for state in ("off", "on"):
            t, b = row[f"tcp_offloads_{state}"], base[f"tcp_offloads_{state}"]
            cpu = f"{t['linkd_cpu_s_per_gbit']:>18.3f}" if label != "direct veth" else ""
            print(f"{label:<16}{state:>9}{t['bps'] / 1e9:>8.2f}{t['bps'] / b['bps']:>10.2f}{cpu}")
    print("\none TCP stream through the link shaped in linkd, offloads on (super-frames)")
    print(f"{'path':<16}{'rate Gb/s':>10}{'goodput Gb/s':>14}{'allowed Gb/s':>14}{'error %':>9}")
    linkd = {label: row for label, row in rows.items() if "lateness" in row}
    for label, row in linkd.items():
        for rate in SHAPED_RATES_BPS:
            t = row[f"shaped_{rate}"]
            print(f"{label:<16}{rate / 1e9:>10.0f}{t['bps'] / 1e9:>14.3f}"
                  f"{t['expected_bps'] / 1e9:>14.3f}{t['error_pct']:>+9.2f}")  # fmt: skip
    for label, row in linkd.items():
        print(f"\n{label} timer lateness:", json.dumps([t["lateness"] for t in row["lateness"]]))


if __name__ == "__main__":
    main()
