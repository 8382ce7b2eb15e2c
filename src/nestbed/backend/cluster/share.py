"""One host's share of an experiment placed on several hosts, computed from the one-host plan
without touching the system.

The share is the one-host plan (``backend.plan``) cut along the placement: the host builds
only its own nodes, with the same interface names, addresses, routes and /etc/hosts as on one
host. A link or LAN whose members sit on different hosts is *cut*: on every host holding
members of it, its fabric gets one VXLAN device (one VNI per link or LAN, the same on every
host) that stands for all the members elsewhere.

- A shaped cut link or LAN stays in nestbed-linkd: the tunnel is one more, unshaped, port of
  the link. Each member's pipes run on that member's host, so a frame leaves through its
  sender's egress pipe before it is encapsulated: a cut link (whose shaping is all on the
  sending side, see ``spec.resolve``) is shaped exactly once per direction, on the sending
  host, and what arrives from the tunnel is handed to the local member by the kernel with no
  link emulator on the way (``Tunnel.deliver``; linkd sends into the tunnel through a veth
  pair, ``Tunnel.feed``, since whatever arrives on a port linkd reads it would forward). A
  LAN's ingress half and its switching run in the receiving host's linkd, once.
- An unshaped cut link becomes what an unshaped LAN is: each local member's veth to the
  fabric, and a bridge there joined by the VXLAN device.

The underlay between two hosts takes time of its own: a cut link's sending pipe gives up as
much of its delay as the underlay's measured one-way time to the other host (never below
zero), so that a frame arrives after the link's delay, as on one host. A LAN's members may
be on several hosts, each farther or nearer: its delays are not compensated.

Every interface of a cut link or LAN gets the link MTU: a local link's (1500), unless the
inner MTU (the underlay's less the 50 bytes of VXLAN over IPv4) is smaller, as on a 1500-byte
underlay (1450). The nodes' own interfaces carry it, so their stacks fragment larger packets
or refuse them (DF) themselves, where the tunnel would drop them silently.

Simulated nodes (``make-simulated``) have no namespace: all of them run in one nestbed-sim,
on one host, which the placement names for each of them. An attachment (a link between an
emulated and a simulated node) has the simulator's fabric interface as its simulated
member's end, so an attachment whose emulated node is on another host is cut as any link
is: the simulator's end is bridged to (unshaped) or piped into (shaped) the link's tunnel on
the simulator's host. Only that host's share has the simulated part.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nestbed.backend.plan import (
    IFNAME_MAX,
    Bridge,
    EmulatedLink,
    Interface,
    PipePort,
    Plan,
    Veth,
    check_names,
)
from nestbed.backend.simplan import Simulation
from nestbed.errors import InternalError, UserError

DEFAULT_PORT = 14789  # VXLAN's UDP port between hosts (containerlab's choice; IANA's is 4789)
DEFAULT_UNDERLAY_MTU = 1500
LINK_MTU = 1500  # a link's MTU on one host: veth's default, which the one-host build keeps
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
TUNNEL_PORT = "_vxlan"  # the VXLAN device's port name in linkd (no node name has a "_")
HOST_NAME_RE = re.compile(r"^[-0-9A-Za-z_]+$")


@dataclass(frozen=True)
class Underlay:
    """How hosts reach each other: each host's own address, the MTU of the network between
    them, and the UDP port VXLAN uses."""

    addresses: dict[str, str]  # host -> its underlay IPv4 address
    mtu: int = DEFAULT_UNDERLAY_MTU
    port: int = DEFAULT_PORT
    # host -> other host -> one-way time over the underlay (s), as measured at swap-in
    delays_s: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def inner_mtu(self) -> int:
        return self.mtu - VXLAN_OVERHEAD

    @property
    def link_mtu(self) -> int:
        """The MTU of a cut link's interfaces: a local link's, or the inner MTU if smaller."""
        return min(LINK_MTU, self.inner_mtu)


@dataclass(frozen=True)
class Tunnel:
    """The VXLAN device of one cut link or LAN on one host, in the host's fabric."""

    link: str
    vni: int
    ifname: str
    local: str  # this host's underlay address (the device's UDP socket stays in its namespace)
    remotes: tuple[str, ...]  # the other hosts holding members, by underlay address
    port: int
    mtu: int
    bridge: str | None  # the fabric bridge it joins (unshaped), or None (a linkd port)
    # A shaped point-to-point cut link: the fabric end of the local member's port, to which
    # the kernel hands what arrives (shaped on the sending host already), and linkd's port
    # into the tunnel, one end of a veth pair whose other end the kernel redirects into it.
    deliver: str | None = None
    feed: str | None = None

    @property
    def devices(self) -> tuple[str, ...]:
        """The interfaces it makes in the fabric: the VXLAN device, and the feed's pair."""
        return (self.ifname,) + ((self.feed, kernel_end(self.feed)) if self.feed else ())


@dataclass(frozen=True)
class HostShare:
    """What one host builds: a plan of its own nodes, its tunnels, and the interfaces whose
    MTU is the link MTU."""

    host: str
    plan: Plan
    tunnels: tuple[Tunnel, ...]
    mtus: tuple[tuple[str, str, int], ...]  # (namespace, interface, MTU)
    underlay: Underlay
    # (link, port, seconds) taken off the port's egress delay for the underlay's time
    compensated: tuple[tuple[str, str, float], ...] = ()


def vni(experiment: str, link: str) -> int:
    """A VNI for the link, from its experiment's and its own name (24 bits, never 0).

    Deterministic, so every host derives the same; two experiments sharing an underlay
    practically never collide (and the kernel refuses a second device with the same VNI and
    port on a host, so a collision fails the swap-in rather than mixing frames)."""
    digest = hashlib.sha256(f"{experiment}/{link}".encode()).digest()
    return int.from_bytes(digest[:3], "big") or 1


def host_fabric(fabric: str, host: str) -> str:
    """The host's fabric namespace: the experiment's, named with the host too, so that
    simulated hosts on one machine (where /run/netns is shared) do not collide."""
    return f"{fabric}.{host}"


def check_placement(p: Plan, placement: Mapping[str, str], underlay: Underlay) -> None:
    """One sentence (UserError) for a placement or underlay the shares cannot be built from."""
    simulated = p.simulation.nodes if p.simulation is not None else ()
    missing = [n for n in [*(n.name for n in p.nodes), *simulated] if n not in placement]
    if missing:
        raise UserError(f"node {missing[0]} of experiment {p.experiment} is placed on no host")
    if len({placement[n] for n in simulated}) > 1:
        raise UserError(
            f"the simulated nodes of experiment {p.experiment} are placed on more than one "
            "host; they run in one nestbed-sim, so place them all on one"
        )
    for host in sorted(set(placement.values())):
        if not HOST_NAME_RE.match(host):
            raise UserError(f"host name {host!r} may hold only letters, digits, '-' and '_'")
        if host not in underlay.addresses:
            raise UserError(f"host {host} has no underlay address; give it one")
    if underlay.inner_mtu < 576:
        raise UserError(
            f"an underlay MTU of {underlay.mtu} leaves {underlay.inner_mtu} bytes inside VXLAN; "
            "IPv4 needs 576 at least"
        )


def cut_links(p: Plan, placement: Mapping[str, str]) -> dict[str, set[str]]:
    """Links and LANs whose members sit on more than one host, with those hosts."""
    hosts: dict[str, set[str]] = {}
    for link, nodes in link_members(p).items():
        hosts[link] = {placement[n] for n in nodes}
    return {link: h for link, h in hosts.items() if len(h) > 1}


def link_members(p: Plan) -> dict[str, list[str]]:
    """Each link or LAN's member nodes, links in the plan's order (the IR's); an attachment's
    simulated node is a member by its end in the fabric, which nestbed-sim reads."""
    member = _members(p)
    found: dict[str, list[str]] = {}
    for veth in p.veths:
        found.setdefault(veth.link, [])
        for end in (veth.a, veth.b):
            node = member(veth.link, end)
            if node is not None:
                found[veth.link].append(node)
    return found


def _members(p: Plan) -> Callable[[str, Interface], str | None]:
    """The node whose end a veth's end of a link is: an emulated node's in its namespace, a
    simulated node's the attachment's interface in the fabric; None for the fabric's other
    ends (looked up, not searched: a plan has thousands of ends)."""
    node_of = {n.netns: n.name for n in p.nodes}
    attachments = p.simulation.attachments if p.simulation is not None else ()
    attached = {(a.link, a.ifname): a.simulated_node for a in attachments}

    def member(link: str, end: Interface) -> str | None:
        if end.netns == p.fabric:
            return attached.get((link, end.ifname))
        return node_of.get(end.netns)

    return member


def simulator_host(p: Plan, placement: Mapping[str, str]) -> str | None:
    """The host of the experiment's nestbed-sim: its simulated nodes' (None without)."""
    if p.simulation is None:
        return None
    return placement[p.simulation.nodes[0]]


def share(p: Plan, placement: Mapping[str, str], host: str, underlay: Underlay) -> HostShare:
    """Host ``host``'s share of plan ``p`` with nodes placed by ``placement`` (node -> host)."""
    check_placement(p, placement, underlay)
    local_ns = {n.netns for n in p.nodes if placement[n.name] == host}
    fabric = host_fabric(p.fabric, host)
    cut = cut_links(p, placement)
    member_of = _members(p)
    # Numbers for the names a cut adds (its tunnel; an unshaped one's bridge and ends, named
    # unlike any of the plan's own, whose numbers count simulated links too).
    index = {link: i for i, link in enumerate(link_members(p))}
    mtu = underlay.link_mtu
    simulator = simulator_host(p, placement) == host

    def here(end: Interface) -> Interface:
        return replace(end, netns=fabric) if end.netns == p.fabric else end

    veths: list[Veth] = []
    bridges: list[Bridge] = []
    cut_bridges: dict[str, tuple[str, list[str]]] = {}  # link -> (bridge, fabric ends)
    for veth in p.veths:
        owned = [(end, m) for end in (veth.a, veth.b)
                 if (m := member_of(veth.link, end)) is not None]  # fmt: skip
        if veth.link in cut and len(owned) == 2:
            # An unshaped cut link: each local member's own veth to a bridge in the fabric
            # (a simulated member's end is nestbed-sim's, frames whole: no offloads).
            i = index[veth.link]
            for j, (end, member) in enumerate(owned):
                if placement[member] == host:
                    fabric_end = Interface(fabric, f"c{i}p{j}", None, end.netns == p.fabric)
                    veths.append(Veth(here(end), fabric_end, veth.link))
                    cut_bridges.setdefault(veth.link, (f"bc{i}", []))[1].append(fabric_end.ifname)
        elif any(placement[member] == host for _, member in owned):
            veths.append(Veth(here(veth.a), here(veth.b), veth.link))
    bridges += [Bridge(fabric, br, tuple(ends), link) for link, (br, ends) in cut_bridges.items()]
    fabric_ends = {end.ifname for v in veths for end in (v.a, v.b) if end.netns == fabric}
    for bridge in p.bridges:
        ports = tuple(port for port in bridge.ports if port in fabric_ends)
        if ports:
            bridges.append(replace(bridge, netns=fabric, ports=ports))
    emulated: list[EmulatedLink] = []
    compensated: list[tuple[str, str, float]] = []
    delivered: dict[str, tuple[str, str]] = {}  # link -> (local member's port, linkd's feed)
    for link in p.emulated:
        ports = tuple(port for port in link.ports if port.ifname in fabric_ends)
        if not ports:
            continue
        if link.link in cut:
            tunnel_port = _tunnel_ifname(index[link.link])
            if not link.lan and len(cut[link.link]) == 2:
                (other,) = cut[link.link] - {host}
                by_s = underlay.delays_s.get(host, {}).get(other, 0.0)
                if by_s > 0:
                    ports = tuple(replace(port, egress=less_delay(port.egress, by_s))
                                  for port in ports)  # fmt: skip
                    compensated += [(link.link, port.port, by_s) for port in ports]
                (local,) = ports  # the one member here; the other is across the tunnel
                if not local.ingress:  # nothing to shape on arrival: the kernel delivers
                    tunnel_port = _feed_ifname(index[link.link])
                    delivered[link.link] = (local.ifname, tunnel_port)
            ports += (PipePort(TUNNEL_PORT, tunnel_port, {}, {}),)
        emulated.append(replace(link, ports=ports))

    tunnels = []
    bridge_of = {b.link: b.ifname for b in bridges}
    for link in cut:
        if host not in cut[link]:
            continue
        tunnels.append(
            Tunnel(
                link=link,
                vni=vni(p.experiment, link),
                ifname=_tunnel_ifname(index[link]),
                local=underlay.addresses[host],
                remotes=tuple(sorted(underlay.addresses[h] for h in cut[link] - {host})),
                port=underlay.port,
                mtu=mtu,
                bridge=bridge_of.get(link),
                deliver=delivered.get(link, (None, None))[0],
                feed=delivered.get(link, (None, None))[1],
            )
        )
    mtus = tuple((end.netns, end.ifname, mtu) for v in veths if v.link in cut for end in (v.a, v.b))
    nodes = tuple(n for n in p.nodes if n.netns in local_ns)
    uses_fabric = bool(bridges or emulated or tunnels or simulator)
    result = replace(
        p,
        fabric=fabric,
        nodes=nodes,
        veths=tuple(veths),
        bridges=tuple(bridges),
        emulated=tuple(emulated),
        namespaces=((fabric,) if uses_fabric else ()) + tuple(n.netns for n in nodes),
        simulation=_simulation(p, cut, mtu) if simulator else None,
    )
    added = [name for t in tunnels for name in t.devices]
    too_long = check_names(result) + [n for n in added if len(n) > IFNAME_MAX]
    if too_long:
        raise InternalError(f"interface name {too_long[0]} is longer than {IFNAME_MAX}")
    return HostShare(host, result, tuple(tunnels), mtus, underlay, tuple(compensated))


def mtu_warning(p: Plan, cut: Mapping[str, set[str]], underlay: Underlay) -> str | None:
    """One line for a swap-in whose cut links carry smaller packets than its links on one
    host do (None if they carry as much)."""
    if not cut or underlay.link_mtu >= LINK_MTU:
        return None
    links = list(cut)
    named = ", ".join(links[:3]) + (f" and {len(links) - 3} more" if len(links) > 3 else "")
    return (
        f"the links of experiment {p.experiment} cut between hosts ({named}) carry packets of "
        f"at most {underlay.link_mtu} bytes, a link on one host {LINK_MTU}: the underlay's MTU "
        f"{underlay.mtu} less VXLAN's {VXLAN_OVERHEAD}; give the underlay an MTU of "
        f"{LINK_MTU + VXLAN_OVERHEAD} or more (jumbo frames, docs/cluster.md) to carry {LINK_MTU}"
    )


def _simulation(p: Plan, cut: Mapping[str, set[str]], link_mtu: int) -> Simulation | None:
    """The simulated part as its host runs it: an attachment cut between hosts carries the
    link MTU, and nestbed-sim's device there is told so (ns-3's TCP segments are 1448
    bytes and heed no peer's MSS: it fragments them rather than have the tunnel drop them)."""
    if p.simulation is None:
        return None
    attachments = tuple(replace(a, mtu=link_mtu) if a.link in cut else a
                        for a in p.simulation.attachments)  # fmt: skip
    return replace(p.simulation, attachments=attachments)


def less_delay(params: dict[str, Any], by_s: float) -> dict[str, Any]:
    """linkd pipe parameters with ``by_s`` less constant delay (never below zero)."""
    delay = params.get("delay", {})
    if not delay.get("delay_ns"):
        return params
    return {**params, "delay": {**delay, "delay_ns": max(0, delay["delay_ns"] - round(by_s * 1e9))}}


def _tunnel_ifname(index: int) -> str:
    return f"vx{index}"


def _feed_ifname(index: int) -> str:
    """linkd's end of the veth pair into the tunnel (the other end is ``kernel_end``'s)."""
    return f"vx{index}f"


def kernel_end(feed: str) -> str:
    """The end of the feed's veth pair that the kernel redirects into the VXLAN device."""
    return f"{feed}k"


def shares(p: Plan, placement: Mapping[str, str], underlay: Underlay) -> dict[str, HostShare]:
    """Every host's share, by host (hosts given no node get none)."""
    return {h: share(p, placement, h, underlay) for h in sorted(set(placement.values()))}
