"""What linktest expects of each direction and each route, computed from the experiment alone:
delay, loss and rate of every directed member pair of every link and LAN, where the routes
take a packet, and the rounds in which tests can run side by side."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from nestbed.model import Experiment, Link, Shaping

# Bytes linkd adds to a UDP payload when it times a frame: Ethernet 14 + IPv4 20 + UDP 8, and
# the per-frame wire overhead (preamble and delimiter 8, FCS 4, inter-frame gap 12) that
# nestbed-pipe's bandwidth stage charges. nestbed-probe's --rate counts frames the same way.
FRAME_HEADERS = 14 + 20 + 8
WIRE_OVERHEAD = 24


def wire_bits(payload: int) -> int:
    """Bits a datagram of ``payload`` bytes occupies in a shaped pipe."""
    return (payload + FRAME_HEADERS + WIRE_OVERHEAD) * 8


@dataclass(frozen=True)
class Direction:
    """One directed member pair of a link or LAN: packets from ``src`` to ``dst``."""

    link: str
    lan: bool
    src: str
    dst: str
    src_ip: str
    dst_ip: str
    stages: tuple[Shaping, ...]  # the pipes a packet passes: src's egress, dst's ingress
    down: bool = False  # the link was taken down by an event

    @property
    def label(self) -> str:
        return f"{self.src} → {self.dst}"

    @property
    def loss(self) -> float:
        """Probability that a packet is lost on the way (every stage's long-run loss)."""
        if self.down:
            return 1.0
        delivered = 1.0
        for s in self.stages:
            delivered *= (1 - s.loss) * (
                1 - (s.gilbert_elliott.loss_rate if s.gilbert_elliott else 0)
            )
        return 1 - delivered

    @property
    def bursty(self) -> Shaping | None:
        """The stage with Gilbert-Elliott loss, if any (its losses come in runs)."""
        return next((s for s in self.stages if s.gilbert_elliott), None)

    @property
    def rate_bps(self) -> int:
        """The narrowest stage's bandwidth; 0 when no stage is limited."""
        rates = [s.bandwidth_bps for s in self.stages if s.bandwidth_bps]
        return min(rates) if rates else 0

    @property
    def jitter_s(self) -> float:
        return sum(s.jitter_s for s in self.stages)

    def delay_s(self, payload: int) -> float:
        """Configured one-way delay of a ``payload``-byte datagram in an empty pipe: each stage's
        delay plus the time its bandwidth takes to serialize the frame."""
        return sum(
            s.delay_s + (wire_bits(payload) / s.bandwidth_bps if s.bandwidth_bps else 0)
            for s in self.stages
        )

    def loss_after_bottleneck(self) -> float:
        """Loss in the stages after the narrowest one (it thins what that stage delivered)."""
        rates = [s.bandwidth_bps or math.inf for s in self.stages]
        narrowest = rates.index(min(rates))
        kept = 1.0
        for s in self.stages[narrowest + 1 :]:
            kept *= 1 - s.loss
        return 1 - kept


def with_links(exp: Experiment, links: Iterable[Link]) -> Experiment:
    """``exp`` with its links and LANs replaced by these (same names: as events left them)."""
    by_name = {link.name: link for link in links}
    return exp.model_copy(
        update={
            "links": tuple(by_name.get(x.name, x) for x in exp.links),
            "lans": tuple(by_name.get(x.name, x) for x in exp.lans),
        }
    )


def directions(exp: Experiment, down: Iterable[str] = ()) -> list[Direction]:
    """Every directed member pair of every link and LAN, in file order."""
    down = set(down)
    found = []
    for link in exp.all_links:
        for a in link.ports:
            for b in link.ports:
                if a.node == b.node:
                    continue
                found.append(
                    Direction(
                        link=link.name,
                        lan=link.kind == "lan",
                        src=a.node,
                        dst=b.node,
                        src_ip=a.ip,
                        dst_ip=b.ip,
                        stages=_stages(link, a.node, b.node),
                        down=link.name in down,
                    )
                )
    return found


def _stages(link: Link, src: str, dst: str) -> tuple[Shaping, ...]:
    if link.noshaping:
        return ()
    # A packet between members passes the sender's egress, then the receiver's ingress.
    return (link.port(src).egress, link.port(dst).ingress)


@dataclass(frozen=True)
class Route:
    """Where a packet from ``src`` to ``dst_ip`` (an address of node ``dst``) goes."""

    src: str
    dst: str
    dst_ip: str
    hops: tuple[Direction, ...]  # the directions it takes, when it arrives
    reaches: bool
    why: str = ""  # why it does not arrive

    @property
    def label(self) -> str:
        return f"{self.src} → {self.dst} ({self.dst_ip})"

    @property
    def delivered(self) -> float:
        """Probability a packet arrives (0 when the routes do not take it there)."""
        if not self.reaches:
            return 0.0
        return math.prod(1 - h.loss for h in self.hops)


@dataclass
class _Interface:
    link: str
    network: ipaddress.IPv4Network
    ip: ipaddress.IPv4Address


def routes(
    exp: Experiment,
    tables: dict[str, Sequence[tuple[str, str]]],
    forwarding: set[str],
    down: Iterable[str] = (),
) -> list[Route]:
    """Follows the nodes' route tables from every node to one address of every other node it
    has no link with: ``tables`` is node -> (destination prefix or "default", next hop) as
    installed, ``forwarding`` the nodes that forward packets."""
    by_link = {(d.link, d.src, d.dst): d for d in directions(exp, down)}
    interfaces: dict[str, list[_Interface]] = {n.name: [] for n in exp.nodes}
    owner: dict[tuple[str, str], str] = {}  # (link, ip) -> node
    for link in exp.all_links:
        for p in link.ports:
            iface = p.interface
            interfaces[p.node].append(_Interface(link.name, iface.network, iface.ip))
            owner[(link.name, p.ip)] = p.node
    found = []
    for src in exp.nodes:
        neighbours = {
            n for i in interfaces[src.name] for (link, _), n in owner.items() if link == i.link
        }
        for dst in exp.nodes:
            if dst.name in neighbours or dst.name == src.name or not interfaces[dst.name]:
                continue
            target = str(interfaces[dst.name][0].ip)
            found.append(
                _follow(src.name, dst.name, target, interfaces, owner, tables, forwarding, by_link)
            )
    return found


def _follow(src, dst, target, interfaces, owner, tables, forwarding, by_link) -> Route:  # type: ignore[no-untyped-def]
    """Hop by hop, as the kernel would: the longest matching prefix among the node's connected
    subnets and its routes (a connected subnet wins a tie)."""
    address = ipaddress.IPv4Address(target)
    node, hops, seen = src, [], set()

    def stop(why: str) -> Route:
        return Route(src, dst, target, tuple(hops), False, why)

    while True:
        if node in seen:
            return stop(f"a routing loop through {node}")
        seen.add(node)
        if node == dst:  # the address is one of its own, on another interface
            return _arrived(src, dst, target, hops)
        if node != src and node not in forwarding:
            return stop(f"{node} does not forward")
        connected = max((i for i in interfaces[node] if address in i.network),
                        key=lambda i: i.network.prefixlen, default=None)  # fmt: skip
        route = _lookup(tables.get(node, ()), address)
        if connected is not None and (route is None or route[0] <= connected.network.prefixlen):
            last = owner.get((connected.link, target))
            if last is None:
                return stop(f"no member of {connected.link} has it")
            hops.append(by_link[(connected.link, node, last)])
            return _arrived(src, dst, target, hops)
        if route is None:
            return stop(f"{node} has no route to it")
        via = route[1]
        gateway = ipaddress.IPv4Address(via)
        out = [i for i in interfaces[node] if gateway in i.network]
        nxt = owner.get((out[0].link, via)) if out else None
        if nxt is None:
            return stop(f"{node}'s gateway {via} is not a neighbour")
        hops.append(by_link[(out[0].link, node, nxt)])
        node = nxt


def _arrived(src: str, dst: str, target: str, hops: list[Direction]) -> Route:
    down = next((h for h in hops if h.down), None)
    if down is not None:
        return Route(src, dst, target, tuple(hops), False, f"link {down.link} is down")
    return Route(src, dst, target, tuple(hops), True)


def _lookup(
    table: Sequence[tuple[str, str]], address: ipaddress.IPv4Address
) -> tuple[int, str] | None:
    """The longest prefix in ``table`` that holds ``address``: its length and next hop."""
    best: tuple[int, str] | None = None
    for destination, via in table:
        network = ipaddress.IPv4Network("0.0.0.0/0" if destination == "default" else destination)
        if address in network and (best is None or network.prefixlen > best[0]):
            best = (network.prefixlen, via)
    return best


@dataclass
class _Round:
    busy: set[str] = field(default_factory=set)
    load_bps: float = 0.0
    members: list[int] = field(default_factory=list)


def rounds(
    users: Sequence[tuple[str, ...]], load_bps: Sequence[float] = (), max_load_bps: float = math.inf
) -> list[list[int]]:
    """Groups tests (by index) into rounds in which no node takes part in two tests, as
    Emulab's linktest does, and the rounds' summed offered load stays under ``max_load_bps``.
    ``users[i]`` are the nodes test i involves. Greedy, first fit, in order."""
    made: list[_Round] = []
    for i, nodes in enumerate(users):
        load = load_bps[i] if load_bps else 0.0
        for r in made:
            if r.busy.isdisjoint(nodes) and (not r.members or r.load_bps + load <= max_load_bps):
                break
        else:
            r = _Round()
            made.append(r)
        r.busy.update(nodes)
        r.load_bps += load
        r.members.append(i)
    return [r.members for r in made]
