"""Carries out one host's share of an experiment on the host this process runs on: the Linux
back end builds the share's plan, then each cut link's VXLAN device is made in the host's
fabric, with its UDP socket in the host's own network namespace (where the underlay address
is), and every interface of a cut link gets the inner MTU, read back to check it took.

The VXLAN device lives in the fabric namespace, so swapping out (deleting the experiment's
namespaces) removes it and closes its socket; nothing of the experiment stays on the host.
A shaped point-to-point cut link's tunnel is joined to linkd and to the local member by the
kernel (tc's ``mirred``): linkd sends into a veth pair whose far end is redirected into the
VXLAN device, and what the device receives is redirected to the member's port, shaped
already on the sending host, without a second link emulator on its way.

A share being built is written down first (``BUILDING``), and crossed out once built or
removed: an agent that dies while building leaves the note, and the host's next agent
removes what the note names before it serves (``remove_unfinished``), since no one else can
(the controller's swap-in has failed, or given up on this host).
"""

from __future__ import annotations

import contextlib
import json
import pickle
import statistics
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from nestbed.backend import linux, offloads
from nestbed.backend.cluster import remote as commands
from nestbed.backend.cluster import slots, workdirs
from nestbed.backend.cluster.share import HostShare, Tunnel, kernel_end
from nestbed.backend.plan import mark
from nestbed.errors import EnvironmentProblem

_ZERO_MAC = "00:00:00:00:00:00"  # the FDB entry every unknown or broadcast frame floods to
BUILDING = ".cluster-building"  # in the host's state folder: one note per share being built


def _ip(argv: list[str], what: str) -> str:
    """Runs an iproute2 command (``ip`` or ``bridge``); its stdout, or one sentence naming
    ``what`` failed and why."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise EnvironmentProblem(f"{argv[0]} is not installed; install iproute2") from exc
    if result.returncode != 0:
        raise EnvironmentProblem(
            f"{what} failed: `{' '.join(argv)}` said {result.stderr.strip() or result.returncode}"
        )
    return result.stdout


def swap_in(part: HostShare, limit: int | None = None) -> None:
    """Builds the share on this host, in slots of its ``limit`` no other experiment holds
    (``slots.HostFull`` if they took them since the share was placed; no limit: whatever
    others hold); on failure removes what it made and re-raises."""
    with _building(part):
        slots.take(part.plan.experiment, slots_of(part), limit)
        _swap_in(part)


def slots_of(part: HostShare) -> int:
    """The slots a share takes: one a node, and one for the simulator if it runs here."""
    return len(part.plan.nodes) + (part.plan.simulation is not None)


def _swap_in(part: HostShare) -> None:
    check_underlay(part)
    note = _note(part)
    note.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    note.write_bytes(pickle.dumps(part))
    try:
        linux.swap_in(part.plan, attach=lambda step: _attach(part, step))
    finally:
        note.unlink(missing_ok=True)


def swap_out(part: HostShare) -> None:
    """Removes everything of the share from this host (safe on a partial or absent one),
    once a build of it under way here has ended."""
    with _building(part):
        commands.forget(linux.run_dir(part.plan))
        linux.swap_out(part.plan)  # its processes end first: none still writes its folders
        workdirs.remove(part.plan.experiment)
        _note(part).unlink(missing_ok=True)
        slots.give_back(part.plan.experiment)


_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


@contextlib.contextmanager
def _building(part: HostShare) -> Iterator[None]:
    """The experiment's share on this host, one swap-in or swap-out of it at a time."""
    with _locks_lock:
        lock = _locks.setdefault(part.plan.experiment, threading.Lock())
    with lock:
        yield


def _note(part: HostShare) -> Path:
    return linux.RUN_DIR / BUILDING / part.plan.experiment


def remove_unfinished() -> list[str]:
    """Removes every share whose build an agent of this host began and never finished (it
    died meanwhile); the experiments removed. Only for a starting agent: a live one's
    builds in progress look the same."""
    removed = []
    notes = linux.RUN_DIR / BUILDING
    for note in sorted(notes.iterdir()) if notes.is_dir() else []:
        try:
            part = pickle.loads(note.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            note.unlink(missing_ok=True)  # half written: its build never began
            continue
        swap_out(part)
        removed.append(part.plan.experiment)
    return removed


PINGS = 50  # per other host, 5 ms apart, when the underlay's time is measured


def underlay_paths(addresses: list[str]) -> dict[str, tuple[float, int]]:
    """For each address, the one-way time from this host (``typical_one_way_s``): what a
    frame of a cut link meets on the underlay, its processing included; and the MTU of the
    route there, which a packet of that size must cross unfragmented (a switch between the
    hosts that carries less would drop the tunnel's largest frames without a word)."""
    found = {}
    for address in addresses:
        out = _ip(["ping", "-n", "-c", str(PINGS), "-i", "0.005", "-W", "1", address],
                  f"measuring the underlay to {address}")  # fmt: skip
        mtu = route_mtu(address)[1]
        whole = subprocess.run(
            ["ping", "-n", "-q", "-c", "2", "-i", "0.01", "-W", "1", "-M", "do", "-s",
             str(mtu - ICMP_HEADERS), address], capture_output=True, text=True, check=False,
        )  # fmt: skip
        if whole.returncode != 0:
            raise EnvironmentProblem(
                f"a {mtu}-byte packet does not reach {address} unfragmented, though the route "
                f"there has MTU {mtu}; give every switch between the hosts that MTU, or the "
                "hosts' interfaces the MTU the switches carry"
            )
        found[address] = (typical_one_way_s(out, address), mtu)
    return found


ICMP_HEADERS = 28  # IPv4's 20 bytes and ICMP's 8 around a ping's payload


def route_mtu(address: str) -> tuple[str, int]:
    """The interface this host reaches ``address`` through, and its MTU."""
    (route,) = json.loads(_ip(["ip", "-j", "route", "get", address], f"routing to {address}"))
    dev = route["dev"]
    (link,) = json.loads(_ip(["ip", "-j", "link", "show", "dev", dev], f"reading {dev}"))
    return dev, int(link["mtu"])


def typical_one_way_s(ping_output: str, address: str) -> float:
    """Half the median round trip of ping's replies (``64 bytes from …: icmp_seq=1 ttl=64
    time=0.512 ms``).

    A cut link's pipe gives this much of its delay up, so that its frames arrive, on the
    whole, after the link's delay, as on one host. Half the least round trip, given up
    before, left every frame late by the underlay's spread over its fastest crossing: on the
    simulated hosts a stream's mean crossing stood 22-160 µs above it (docs/benchmarks.md,
    ``bench/cluster.py --hops``), and a cut link was late by as much on top of its own
    emulator's lateness. The median holds up where the mean does not: the hosts are pinged
    at swap-in, each pinging its peers at once, and a few round trips held up by a busy
    host would pull a mean a millisecond above what a crossing takes later (the mean, given
    up once, made the links that much early; linktest 19.10 ms of 20.10 ± 0.45 ms). Half of
    the crossings are faster than what is given up, so a cut link's frame may arrive that
    much early, by the underlay's spread below its median (tens of µs here)."""
    times_ms = sorted(float(t.split()[0]) for t in ping_output.split(" time=")[1:])
    if not times_ms:
        raise EnvironmentProblem(f"measuring the underlay to {address} failed: no echo came back")
    return statistics.median(times_ms) / 2 / 1e3


def check_underlay(part: HostShare) -> None:
    """Every other host of a cut link is reached through an interface whose MTU carries the
    configured underlay MTU (else VXLAN's frames would be dropped or fragmented)."""
    for remote in sorted({r for t in part.tunnels for r in t.remotes}):
        dev, mtu = route_mtu(remote)
        if mtu < part.underlay.mtu:
            raise EnvironmentProblem(
                f"host {part.host} reaches {remote} through {dev}, whose MTU is {mtu}, "
                f"below the underlay MTU {part.underlay.mtu} the cluster is configured with; "
                "configure the underlay MTU to match"
            )


def _attach(part: HostShare, step: list[str]) -> None:
    fabric = part.plan.fabric
    for tunnel in part.tunnels:
        step[0] = f"creating the VXLAN device of {tunnel.link}"
        _create_tunnel(part, tunnel)
    if part.tunnels:
        step[0] = f"turning offloads off in {fabric}"
        linkd_side = [name for t in part.tunnels if t.bridge is None for name in t.devices]
        with linux.inside(fabric):
            offloads.turn_off(linkd_side, linux.OFFLOADS)
    for namespace, ifname, mtu in part.mtus:
        step[0] = f"setting the MTU of {ifname} in {namespace}"
        _ip(["ip", "-n", namespace, "link", "set", "dev", ifname, "mtu", str(mtu)], step[0])
    step[0] = "checking the MTU of the cut links"
    wanted = {(fabric, name): t.mtu for t in part.tunnels for name in t.devices}
    wanted.update({(ns, ifname): mtu for ns, ifname, mtu in part.mtus})
    for (namespace, ifname), mtu in sorted(wanted.items()):
        have = _mtu(namespace, ifname)
        if have != mtu:
            raise EnvironmentProblem(
                f"{ifname} in {namespace} has MTU {have} after it was set to {mtu}"
            )


def _create_tunnel(part: HostShare, t: Tunnel) -> None:
    fabric = part.plan.fabric
    what = f"creating the VXLAN device of {t.link}"
    # Created from this namespace, moved into the fabric in the same request: the device's
    # UDP socket stays here, on the underlay.
    _ip(["ip", "link", "add", t.ifname, "netns", fabric, "mtu", str(t.mtu), "type", "vxlan",
         "id", str(t.vni), "local", t.local, "dstport", str(t.port), "learning"], what)  # fmt: skip
    altname = mark(part.plan.experiment, t.link, "vxlan")
    _ip(["ip", "-n", fabric, "link", "property", "add", "dev", t.ifname, "altname", altname], what)
    for remote in t.remotes:
        # Head-end replication: broadcast and unknown frames go to every other host of the
        # link; the device learns where each MAC address is from what it receives.
        _ip(["bridge", "-n", fabric, "fdb", "append", _ZERO_MAC, "dev", t.ifname,
             "dst", remote], what)  # fmt: skip
    if t.bridge is not None:
        _ip(["ip", "-n", fabric, "link", "set", "dev", t.ifname, "master", t.bridge], what)
    if t.feed is not None and t.deliver is not None:
        into = kernel_end(t.feed)
        _ip(["ip", "-n", fabric, "link", "add", t.feed, "mtu", str(t.mtu), "type", "veth",
             "peer", "name", into, "mtu", str(t.mtu)], what)  # fmt: skip
        _ip(["ip", "-n", fabric, "link", "property", "add", "dev", t.feed, "altname",
             mark(part.plan.experiment, t.link, "feed")], what)  # fmt: skip
        _redirect(fabric, into, t.ifname, what)  # linkd's frames, into the tunnel
        _redirect(fabric, t.ifname, t.deliver, what)  # the tunnel's, to the member
        for end in (t.feed, into):
            _ip(["ip", "-n", fabric, "link", "set", "dev", end, "up"], what)
    _ip(["ip", "-n", fabric, "link", "set", "dev", t.ifname, "up"], what)


def _redirect(namespace: str, source: str, target: str, what: str) -> None:
    """Every frame ``source`` receives is sent out of ``target`` instead, by the kernel (an
    ingress filter matching all, as ``matchall`` would: this kernel has only ``u32``)."""
    _ip(["tc", "-n", namespace, "qdisc", "add", "dev", source, "ingress"], what)
    _ip(["tc", "-n", namespace, "filter", "add", "dev", source, "parent", "ffff:", "protocol",
         "all", "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect",
         "dev", target], what)  # fmt: skip


def _mtu(namespace: str, ifname: str) -> int:
    out = _ip(["ip", "-n", namespace, "-j", "link", "show", "dev", ifname], f"reading {ifname}")
    return int(json.loads(out)[0]["mtu"])
