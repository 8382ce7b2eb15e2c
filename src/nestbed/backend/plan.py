"""What swapping an experiment in will create, computed from the IR without touching the system.

A plan names every namespace, interface, bridge, address, route and emulated pipe, so the Linux
back end only carries it out, a fake back end can record it, and the rules (names, routes,
/etc/hosts) are unit-tested without root.

Layout: every node is a network namespace; a per-experiment *fabric* namespace holds the
switch side of everything that is not a plain cable (LAN bridges, nestbed-linkd and the ends it
bridges). An unshaped link is one veth pair straight between its two nodes. A shaped link or
LAN gives each member a veth pair from the node to the fabric, bridged by nestbed-linkd through
that member's egress and ingress pipes. An unshaped LAN is a Linux bridge in the fabric.
Simulated nodes (`make-simulated`) have no namespace: `simplan` describes them, and an
emulated node's link to one ends in the fabric, where nestbed-sim reads it.
"""

from __future__ import annotations

import base64
import collections
import functools
import hashlib
import heapq
import ipaddress
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nestbed.backend import simplan
from nestbed.backend.simplan import Simulation

if TYPE_CHECKING:
    from nestbed.model import (  # the IR's models load only where one is built
        Experiment,
        Link,
        Port,
        Shaping,
    )

NS_PREFIX = "nb-"
TAG_LENGTH = 8
IFNAME_MAX = 15


def experiment_tag(name: str) -> str:
    """Eight base32 characters (40 bits) from the experiment's name, in every namespace name.

    Deterministic, so cleanup can find an experiment's namespaces from its name; long enough
    that two experiments on one host practically never share one (swap-in also refuses to
    touch a namespace that already exists).
    """
    digest = hashlib.sha256(name.encode()).digest()
    return base64.b32encode(digest).decode()[:TAG_LENGTH].lower()


MARK_PREFIX = "nestbed."
_ALTNAME_MAX = 127


def mark(experiment: str, *parts: str) -> str:
    """The altname that marks an interface as the experiment's: ``nestbed.EXP[.PART...]``.

    Every namespace's loopback carries ``nestbed.EXP``, so cleanup can tell nestbed's
    namespaces from others that merely share the name prefix.
    """
    name = ".".join((MARK_PREFIX + experiment, *parts))
    if len(name) > _ALTNAME_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = name[: _ALTNAME_MAX - 13] + "." + digest
    return name


def fabric_namespace(tag: str) -> str:
    return f"{NS_PREFIX}{tag}"


def node_namespace(tag: str, node: str) -> str:
    return f"{NS_PREFIX}{tag}-{node}"


# IPv6 off everywhere, fabric included: experiments are IPv4, and link-local chatter (router
# solicitations, MLD reports at random times) would cross the emulated links, counted by their
# pipes (drop-by-ordinal included) and seen in every capture.
QUIET = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
# In a node, a program that is not root (a project's, on a server) may still bind any port
# (a web server on 80) and ping: the node's network is the experiment's alone.
UNPRIVILEGED = {"net.ipv4.ip_unprivileged_port_start": "0",
                "net.ipv4.ping_group_range": "0 2147483647"}  # fmt: skip


#: A shaped link all of whose directions are limited to more than this, and only by rate,
#: delay and a DropTail queue, keeps its interfaces' offloads on: a node's TCP then hands
#: nestbed-linkd 64 KB super-frames, which it carries at about 10 Gb/s a core, where frame by
#: frame (offloads off) it carries 1.7-3 Gb/s. The pipes charge a super-frame as its wire
#: frames, and where one acts frame by frame (a full queue; loss and the rest, set by an
#: event) linkd cuts it into them first, so the link behaves as with offloads off. A link
#: with loss, RED, jitter, duplication or corruption from the start keeps offloads off: linkd
#: would cut every super-frame, and TCP through it measured slower so (docs/benchmarks.md).
#: Slower links keep them off too: captures in their nodes show wire frames, and linkd reads
#: them through its packet rings.
OFFLOADS_ABOVE_BPS = 1_000_000_000


def keeps_offloads(link: Link) -> bool:
    """Whether a shaped link's interfaces keep their offloads on: every member's way into the
    link limited to more than ``OFFLOADS_ABOVE_BPS``, and its way out (a LAN's switch to the
    member; nothing on a point-to-point link) too, or not limited; and no direction acts frame
    by frame (nestbed-pipe's ``PipeParams::acts_per_packet``)."""
    return all(
        port.egress.bandwidth_bps > OFFLOADS_ABOVE_BPS
        and (port.ingress.bandwidth_bps == 0 or port.ingress.bandwidth_bps > OFFLOADS_ABOVE_BPS)
        and not (_acts_per_frame(port.egress) or _acts_per_frame(port.ingress))
        for port in link.ports
    )


def _acts_per_frame(s: Shaping) -> bool:
    """Whether a direction decides frame by frame: loss of any kind, RED, jitter, duplication,
    corruption."""
    return bool(
        s.loss > 0
        or s.gilbert_elliott is not None
        or s.drop_ordinals
        or s.queue.kind != "droptail"
        or s.jitter_s > 0
        or s.duplicate > 0
        or s.corrupt > 0
    )


@dataclass(frozen=True)
class Interface:
    """One end of a veth pair: in namespace ``netns`` with name ``ifname``."""

    netns: str
    ifname: str
    address: str | None = None  # "10.1.1.2/24"
    no_offloads: bool = False  # so the emulator sees wire-sized frames


@dataclass(frozen=True)
class Veth:
    a: Interface
    b: Interface
    link: str  # the IR link or LAN it belongs to


@dataclass(frozen=True)
class Bridge:
    netns: str
    ifname: str
    ports: tuple[str, ...]
    link: str


@dataclass(frozen=True)
class PipePort:
    """A member port of an emulated link, as nestbed-linkd's `add_link` takes it."""

    port: str
    ifname: str
    egress: dict[str, Any]
    ingress: dict[str, Any]


PipeSettings = tuple[str, dict[str, Any], dict[str, Any]]  # a port's egress, ingress params


@dataclass(frozen=True)
class EmulatedLink:
    link: str
    lan: bool
    seed: int
    ports: tuple[PipePort, ...]

    def settings(self) -> list[PipeSettings]:
        """Each port's egress and ingress pipe parameters."""
        return [(p.port, p.egress, p.ingress) for p in self.ports]

    def request(self) -> dict[str, Any]:
        return {
            "op": "add_link",
            "link": self.link,
            "lan": self.lan,
            "seed": self.seed,
            "ports": [
                {"port": p.port, "ifname": p.ifname, "egress": p.egress, "ingress": p.ingress}
                for p in self.ports
            ],
        }


@dataclass(frozen=True)
class RouteEntry:
    destination: str  # "default" or a prefix
    via: str  # the next hop's address; "" for a destination on the link of ``dev``
    dev: str = ""  # the node's interface, for a route on its link


@dataclass(frozen=True)
class NodePlan:
    name: str
    netns: str
    interfaces: tuple[str, ...]  # node-side interface names, in port order
    routes: tuple[RouteEntry, ...]
    sysctls: dict[str, str]
    hosts: str  # /etc/hosts for the node
    cpu_cores: float | None = None
    cpu_pin: tuple[int, ...] = ()
    memory_bytes: int | None = None

    @property
    def limited(self) -> bool:
        return bool(self.cpu_cores or self.cpu_pin or self.memory_bytes)


@dataclass(frozen=True)
class Plan:
    experiment: str
    tag: str
    fabric: str
    nodes: tuple[NodePlan, ...]
    veths: tuple[Veth, ...]
    bridges: tuple[Bridge, ...]
    emulated: tuple[EmulatedLink, ...]
    namespaces: tuple[str, ...] = field(default=())
    simulation: Simulation | None = None  # the part nestbed-sim runs

    @property
    def needs_linkd(self) -> bool:
        return bool(self.emulated)

    def sysctls(self, namespace: str) -> tuple[str, dict[str, str]]:
        """Who lives in NAMESPACE (a node's name, or "the fabric") and its sysctls."""
        for node in self.nodes:
            if node.netns == namespace:
                return f"node {node.name}", node.sysctls
        return "the fabric", dict(QUIET)

    def interfaces(self) -> dict[tuple[str, str], str]:
        """(link, node) -> the node's interface on that link or LAN."""
        node_of = {n.netns: n.name for n in self.nodes}
        return {
            (veth.link, node_of[end.netns]): end.ifname
            for veth in self.veths
            for end in (veth.a, veth.b)
            if end.netns in node_of
        }

    def node(self, name: str) -> NodePlan:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)


def pipe_params(s: Shaping) -> dict[str, Any]:
    """nestbed-linkd's PipeParams (the nestbed-pipe crate's serde form) for one direction."""
    params: dict[str, Any] = {}
    if s.gilbert_elliott is not None:
        g = s.gilbert_elliott
        params["loss"] = {
            "model": "gilbert_elliott",
            "p": g.p,
            "r": g.r,
            "loss_in_bad": g.loss_bad,
            "loss_in_good": g.loss_good,
        }
    elif s.loss > 0:
        params["loss"] = {"model": "bernoulli", "p": s.loss}
    if s.drop_ordinals:
        params["drop_ordinals"] = list(s.drop_ordinals)
    q = s.queue
    queue: dict[str, Any] = {}
    if q.limit is not None:
        queue["limit"] = {q.limit_unit: q.limit}
    if q.kind != "droptail":
        queue["red"] = {
            "thresh": q.thresh,
            "maxthresh": q.maxthresh,
            "q_weight": q.q_weight,
            "linterm": q.linterm,
            "gentle": q.gentle,
            "queue_in_bytes": q.limit_unit == "bytes",
            "mean_pktsize": q.mean_packet_size_bytes,
        }
    if queue:
        params["queue"] = queue
    if s.bandwidth_bps:
        params["bandwidth"] = {"rate_bps": s.bandwidth_bps}
    delay: dict[str, Any] = {}
    if s.delay_s:
        delay["delay_ns"] = round(s.delay_s * 1e9)
    if s.jitter_s:
        delay["jitter_ns"] = round(s.jitter_s * 1e9)
        delay["distribution"] = s.jitter_distribution
    if s.reorder:
        delay["reorder"] = True
    if s.duplicate:
        delay["duplicate"] = s.duplicate
    if s.corrupt:
        delay["corrupt"] = s.corrupt
    if delay:
        params["delay"] = delay
    return params


def plan(exp: Experiment, *, emulate_all: bool = False) -> Plan:
    """Everything swap-in creates for ``exp``, named deterministically.

    ``emulate_all`` sends unshaped links through nestbed-linkd too (to measure its overhead).
    Links that events act on are emulated even when unshaped, as Emulab gives them a delay
    node, so they can go down or change bandwidth during the run.
    """
    tag = experiment_tag(exp.name)
    fabric = fabric_namespace(tag)
    simulated = simplan.simulated_nodes(exp)
    ns = {n.name: node_namespace(tag, n.name) for n in exp.nodes if n.name not in simulated}
    node_ifaces: dict[str, list[str]] = {name: [] for name in ns}
    attachment_ifnames: dict[str, str] = {}  # link -> the fabric end nestbed-sim reads
    veths: list[Veth] = []
    bridges: list[Bridge] = []
    emulated: list[EmulatedLink] = []
    iface_of: dict[tuple[str, str], str] = {}  # (node, link) -> node-side ifname

    def node_iface(node: str, link: str) -> str:
        name = f"eth{len(node_ifaces[node])}"
        node_ifaces[node].append(name)
        iface_of[(node, link)] = name
        return name

    def node_end(port: Port, link: str, no_offloads: bool) -> Interface:
        """The node's end of a veth pair to the fabric, with its address."""
        cidr = _cidr(port.ip, port.netmask)
        return Interface(ns[port.node], node_iface(port.node, link), cidr, no_offloads)

    evented = evented_links(exp)
    simplan.check(exp)
    for index, link in enumerate(exp.all_links):
        if simplan.is_simulated(link, simulated):
            continue
        shaped = link.is_shaped or emulate_all or link.name in evented
        if simplan.is_attachment(link, simulated):
            attachment_ifnames[link.name] = f"s{index}"
            if not shaped:
                # Checksums finished and wire-sized frames, for the simulator as for linkd.
                port = next(p for p in link.ports if p.node not in simulated)
                simulator_end = Interface(fabric, f"s{index}", None, no_offloads=True)
                veths.append(Veth(node_end(port, link.name, True), simulator_end, link.name))
                continue
        # nestbed-sim reads wire-sized frames with their checksums finished: a link to a
        # simulated node keeps offloads off whatever its rate.
        no_offloads = shaped and (
            simplan.is_attachment(link, simulated) or not keeps_offloads(link)
        )
        if link.kind == "link" and not shaped:
            a, b = link.ports
            veths.append(
                Veth(
                    Interface(ns[a.node], node_iface(a.node, link.name), _cidr(a.ip, a.netmask)),
                    Interface(ns[b.node], node_iface(b.node, link.name), _cidr(b.ip, b.netmask)),
                    link.name,
                )
            )
            continue
        fabric_ends = []
        for j, port in enumerate(link.ports):
            end = f"l{index}p{j}"
            fabric_ends.append(end)
            if port.node in simulated:  # a shaped attachment: linkd, then nestbed-sim
                simulator_end = Interface(fabric, attachment_ifnames[link.name], None, True)
                veths.append(Veth(simulator_end, Interface(fabric, end, None, True), link.name))
                continue
            veths.append(
                Veth(
                    node_end(port, link.name, no_offloads),
                    Interface(fabric, end, None, no_offloads=no_offloads),
                    link.name,
                )
            )
        if shaped:
            emulated.append(
                EmulatedLink(
                    link=link.name,
                    lan=link.kind == "lan",
                    seed=_seed(exp.name, link.name),
                    ports=tuple(
                        PipePort(p.node, end, pipe_params(p.egress), pipe_params(p.ingress))
                        for p, end in zip(link.ports, fabric_ends, strict=True)
                    ),
                )
            )
        else:
            bridges.append(Bridge(fabric, f"br{index}", tuple(fabric_ends), link.name))

    routes = _routes(exp)
    for node, entries in on_link_routes(exp, iface_of).items():
        routes[node] = entries + list(routes.get(node, ()))
    hosts = _hosts(exp, iface_of)
    simulated_routes = {
        name: [(r.destination, r.via) for r in routes.get(name, ()) if r.via] for name in simulated
    }
    simulation = simplan.simulation(exp, simulated_routes, attachment_ifnames)
    nodes = []
    for n in exp.nodes:
        if n.name in simulated:
            continue
        sysctls = QUIET | UNPRIVILEGED
        if len(node_ifaces[n.name]) > 1:
            sysctls["net.ipv4.ip_forward"] = "1"
        if simulation is not None:
            sysctls.update(simplan.EMULATED_SYSCTLS)
        sysctls.update(n.sysctls)
        nodes.append(
            NodePlan(
                name=n.name,
                netns=ns[n.name],
                interfaces=tuple(node_ifaces[n.name]),
                routes=tuple(routes.get(n.name, ())),
                sysctls=sysctls,
                hosts=hosts,
                cpu_cores=n.cpu_cores,
                cpu_pin=n.cpu_pin,
                memory_bytes=n.memory_bytes,
            )
        )
    in_fabric = bridges or emulated or simulation
    namespaces = tuple([fabric] if in_fabric else []) + tuple(ns.values())
    return Plan(
        experiment=exp.name,
        tag=tag,
        fabric=fabric,
        nodes=tuple(nodes),
        veths=tuple(veths),
        bridges=tuple(bridges),
        emulated=tuple(emulated),
        namespaces=namespaces,
        simulation=simulation,
    )


def evented_links(exp: Experiment) -> set[str]:
    """Links and LANs named by any event of the file, directly or through a group."""
    actions = [*exp.events, *(e for t in exp.timelines for e in t.events)]
    actions += [a for s in exp.sequences for a in s.steps]
    groups = {g.name: g.members for g in exp.groups}
    names = {m for a in actions for m in groups.get(a.object, (a.object,))}
    return names & {link.name for link in exp.all_links}


def _cidr(ip: str, netmask: str) -> str:
    return str(ipaddress.IPv4Interface(f"{ip}/{netmask}"))


def _seed(experiment: str, link: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{experiment}/{link}".encode()).digest()[:8], "big")


def _hosts(exp: Experiment, iface_of: dict[tuple[str, str], str]) -> str:
    """Emulab's /etc/hosts: each node by name, and `<node>-<link>` for each of its interfaces."""
    lines = ["127.0.0.1\tlocalhost"]
    for n in exp.nodes:
        first = True
        for link in exp.all_links:
            for p in link.ports:
                if p.node != n.name:
                    continue
                names = [f"{n.name}-{link.name}"] + ([n.name] if first else [])
                lines.append(f"{p.ip}\t{' '.join(names)}")
                first = False
    return "\n".join(lines) + "\n"


def _routes(exp: Experiment) -> dict[str, list[RouteEntry]]:
    if exp.routing == "manual":
        return {
            n.name: [RouteEntry(r.destination, r.via) for r in n.routes]
            for n in exp.nodes
            if n.routes
        }
    if exp.routing == "none":
        return {}
    return static_routes(exp)


def static_routes(exp: Experiment) -> dict[str, list[RouteEntry]]:
    """Shortest paths (by cost) to every subnet, aggregated into a default route.

    The next hop used most often becomes the default route; only subnets reached another way
    get their own entry, so a large topology needs far fewer than N² routes.

    Dijkstra from every node, keeping only each node's first hop (not whole paths: a chain of
    1000 nodes would hold half a million path entries per source), with the tie-breaking of
    networkx's ``single_source_dijkstra``, which this replaced: the same routes, 10× sooner.
    """
    # Edge u -> v through a link or LAN, weighted by u's cost on it; keep the cheapest (an
    # edge keeps its first place in u's adjacency, as a graph library's would).
    adjacency: dict[str, dict[str, float]] = {n.name: {} for n in exp.nodes}
    hop_address: dict[tuple[str, str], str] = {}  # (u, v) -> v's address on that link
    for link in exp.all_links:
        for p in link.ports:
            for q in link.ports:
                if p.node == q.node:
                    continue
                old = adjacency[p.node].get(q.node)
                if old is None or p.cost < old:
                    adjacency[p.node][q.node] = p.cost
                    hop_address[(p.node, q.node)] = q.ip
    # A subnet that two links share (Emulab allows it) is reached address by address: a node
    # on one of them would otherwise take the other's addresses for its own link's.
    shared = {s for s, n in Counter(link.subnet for link in exp.all_links).items() if n > 1}
    subnets = [(link.subnet, sorted({p.node for p in link.ports}))
               for link in exp.all_links if link.subnet not in shared]  # fmt: skip
    hosts = [(f"{p.ip}/32", sorted({q.node for q in link.ports}))
             for link in exp.all_links if link.subnet in shared for p in link.ports]  # fmt: skip
    costs = {cost for edges in adjacency.values() for cost in edges.values()}
    search = _breadth_first if len(costs) <= 1 else _first_hops
    result: dict[str, list[RouteEntry]] = {}
    for source in sorted(adjacency):
        dist, first = search(adjacency, source)
        wanted: dict[str, str] = {}  # subnet -> next-hop address
        for subnet, members in subnets:
            if source in members:
                continue
            reachable = [(dist[m], m) for m in members if m in dist]
            if not reachable:
                continue
            _, target = min(reachable)
            wanted[subnet] = hop_address[(source, first[target])]
        exact = []  # kept as they are: a default route would not beat a connected subnet
        for host, members in hosts:
            reachable = [(dist[m], m) for m in members if m in dist and source not in members]
            if reachable:
                exact.append(RouteEntry(host, hop_address[(source, first[min(reachable)[1]])]))
        if wanted or exact:
            result[source] = (_aggregate(wanted) if wanted else []) + exact
    return result


def on_link_routes(
    exp: Experiment, iface_of: dict[tuple[str, str], str]
) -> dict[str, list[RouteEntry]]:
    """Routes to each neighbour through the right interface, for a node with two interfaces
    in one subnet (Emulab allows it): its two connected routes cover the same prefix, and the
    kernel would use the first for both links."""
    found: dict[str, list[RouteEntry]] = {}
    for n in exp.nodes:
        if n.simulated:  # nestbed-sim finds the interface of a next hop itself
            continue
        ports = [(link, p) for link in exp.all_links for p in link.ports if p.node == n.name]
        by_subnet = Counter(link.subnet for link, _ in ports)
        for link, _ in ports:
            if by_subnet[link.subnet] < 2:
                continue
            dev = iface_of[(n.name, link.name)]
            found.setdefault(n.name, []).extend(
                RouteEntry(f"{q.ip}/32", "", dev) for q in link.ports if q.node != n.name
            )
    return found


def _first_hops(
    adjacency: dict[str, dict[str, float]], source: str
) -> tuple[dict[str, float], dict[str, str]]:
    """Distances from ``source`` and the first hop towards every node it reaches."""
    dist: dict[str, float] = {}
    seen = {source: 0.0}
    first: dict[str, str] = {}
    order = itertools.count()
    fringe: list[tuple[float, int, str]] = [(0.0, next(order), source)]
    while fringe:
        d, _, v = heapq.heappop(fringe)
        if v in dist:
            continue
        dist[v] = d
        for u, cost in adjacency[v].items():
            through = d + cost
            if u not in dist and (u not in seen or through < seen[u]):
                seen[u] = through
                heapq.heappush(fringe, (through, next(order), u))
                first[u] = u if v == source else first[v]
    return dist, first


def _breadth_first(
    adjacency: dict[str, dict[str, float]], source: str
) -> tuple[dict[str, float], dict[str, str]]:
    """``_first_hops`` where every edge costs the same: Dijkstra's heap, ordered by distance
    then by when a node was reached, pops nodes in breadth-first order, so a queue finds the
    same first hops without the heap."""
    dist = {source: 0.0}
    first: dict[str, str] = {}
    queue = collections.deque([source])
    while queue:
        v = queue.popleft()
        d = dist[v] + 1
        for u in adjacency[v]:
            if u not in dist:
                dist[u] = d
                first[u] = u if v == source else first[v]
                queue.append(u)
    return dist, first


def _aggregate(wanted: dict[str, str]) -> list[RouteEntry]:
    """Routes for ``wanted`` (subnet -> next hop): a default via the commonest next hop, and
    the other subnets of each next hop collapsed into the fewest prefixes covering exactly
    them (a chain's subnets 10.1.1.0/24 ... 10.1.64.0/24 become a handful of prefixes).

    The collapsed prefixes cover no address outside their subnets, so every address routes
    as it would with one route per subnet.
    """
    default, _ = Counter(wanted.values()).most_common(1)[0]
    by_hop: dict[str, list[tuple[int, int]]] = {}
    for subnet, via in wanted.items():
        if via != default:
            by_hop.setdefault(via, []).append(_range(subnet))
    entries = [RouteEntry("default", default)]
    for via, ranges in by_hop.items():
        entries += [RouteEntry(net, via) for net in _collapse(ranges)]
    return entries


@functools.cache  # every node's routes name the same subnets
def _range(subnet: str) -> tuple[int, int]:
    """An IPv4 prefix "a.b.c.d/n" as its first and last address, as integers."""
    address, _, length = subnet.partition("/")
    a, b, c, d = (int(x) for x in address.split("."))
    size = 1 << (32 - int(length))
    start = ((a << 24) | (b << 16) | (c << 8) | d) & ~(size - 1)
    return start, start + size - 1


def _collapse(ranges: list[tuple[int, int]]) -> list[str]:
    """The fewest prefixes covering exactly the union of ``ranges``, in address order (what
    ``ipaddress.collapse_addresses`` gives, without an object per address block)."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    prefixes = []
    for start, end in merged:
        while start <= end:
            # The largest block aligned at start that does not pass end.
            size = (start & -start) if start else 1 << 32
            while size > end - start + 1:
                size >>= 1
            length = 32 - size.bit_length() + 1
            dotted = ".".join(str((start >> shift) & 255) for shift in (24, 16, 8, 0))
            prefixes.append(f"{dotted}/{length}")
            start += size
    return prefixes


def check_names(p: Plan) -> list[str]:
    """Interface names over the kernel's limit (a bug in the naming rules if any)."""
    names = [i.ifname for v in p.veths for i in (v.a, v.b)] + [b.ifname for b in p.bridges]
    return [n for n in names if len(n) > IFNAME_MAX]
