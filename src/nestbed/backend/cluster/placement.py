"""Where a swap-in plan's nodes go on a cluster: the plan as the mapper's topology, the hosts'
own facts (reported by their agents) as its testbed, and the mapper's answer as node -> host.

Simulated nodes (``make-simulated``) all run in one nestbed-sim: the mapper places them as
one node (``SIMULATOR``, a process taking a slot like a node's), joined by the attachments
to the emulated nodes around it, so it lands beside them where it can; each simulated node
is then on the simulator's host.

Pure: the facts are handed in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nestbed.backend.cluster.share import link_members
from nestbed.backend.plan import Plan
from nestbed.errors import Held, UserError
from nestbed.mapper import (
    Host,
    LanMember,
    Testbed,
    Topology,
    VirtualLan,
    VirtualLink,
    VirtualNode,
    map_topology,
)
from nestbed.mapper.fromir import UNLIMITED_ESTIMATE_BPS, desires
from nestbed.mapper.hostsfile import CORES, DEFAULT_SWITCH, MEMORY


@dataclass(frozen=True)
class HostFacts:
    """What an agent says about its host."""

    name: str
    address: str  # its underlay address (where the other hosts' VXLAN reaches it)
    cores: int
    memory_bytes: int
    slots: int  # how many nodes it may hold
    nic_bps: int  # its interface to the underlay
    linkd_pps: int | None = None  # packets/s its link emulator carries (None: not said)
    clock_port: int | None = None  # UDP port its agent answers time requests on
    held: int = 0  # of its slots, those other experiments' shares hold

    @property
    def free(self) -> int:
        return max(0, self.slots - self.held)


SIMULATOR = "_simulator"  # the simulated part, as one node to the mapper (no node has a "_")


def topology_of_plan(p: Plan) -> Topology:
    """The plan's nodes, links and LANs as the mapper sees them: a node wants its CPU quota
    and memory limit; a link or LAN member weighs its fastest shaped direction (unlimited
    ones the mapper's estimate of an unshaped link). The simulated nodes are one node,
    ``SIMULATOR``, and the links among them are inside it."""
    nodes = [VirtualNode(n.name, desires=desires(n.cpu_cores, n.memory_bytes)) for n in p.nodes]
    simulated = set(p.simulation.nodes) if p.simulation is not None else set()
    if simulated:
        nodes.append(VirtualNode(SIMULATOR))
    rates: dict[tuple[str, str], int] = {}  # (link, node) -> bits/s
    lans = {link.link for link in p.emulated if link.lan} | {b.link for b in p.bridges}
    for link in p.emulated:
        for port in link.ports:
            rates[(link.link, port.port)] = max(
                (d.get("bandwidth", {}).get("rate_bps", 0) for d in (port.egress, port.ingress)),
                default=0,
            )

    def rate(link: str, node: str) -> int:
        return rates.get((link, node)) or UNLIMITED_ESTIMATE_BPS

    def placed(node: str) -> str:
        return SIMULATOR if node in simulated else node

    links, virtual_lans = [], []
    for link, members in link_members(p).items():
        if len(members) == 2 and link not in lans:
            a, b = members
            bps = max(rate(link, a), rate(link, b))
            links.append(VirtualLink(link, placed(a), placed(b), bps, shaped=(link, a) in rates))
        else:
            virtual_lans.append(VirtualLan(link, tuple(
                LanMember(m, rate(link, m), f"{link}-{m}") for m in members
            )))  # fmt: skip
    return Topology(tuple(nodes), tuple(links), tuple(virtual_lans), name=p.experiment)


def testbed_of(hosts: list[HostFacts]) -> Testbed:
    """The cluster's hosts, all on one switch (the underlay), with the slots other
    experiments leave them."""
    return Testbed(
        tuple(
            Host(
                h.name,
                DEFAULT_SWITCH,
                h.nic_bps,
                types={"pc": h.free},
                features={CORES: float(h.cores), MEMORY: float(h.memory_bytes)},
                cores=h.cores,
                linkd_pps=h.linkd_pps,
                uplink=f"link-{h.name}",
            )
            for h in sorted(hosts, key=lambda h: h.name)
        ),
        (DEFAULT_SWITCH,),
    )


def place(p: Plan, hosts: list[HostFacts]) -> dict[str, str]:
    """Node -> host, from the mapper (UserError with one sentence if nothing fits, or
    Held if it would fit but for other experiments); every simulated node on
    the simulator's host."""
    try:
        found = dict(map_topology(topology_of_plan(p), testbed_of(hosts)).hosts)
    except UserError as exc:
        taken = sum(h.slots - h.free for h in hosts)
        if not taken:
            raise
        # Too large for the hosts themselves: the mapper's own sentence says so.
        map_topology(topology_of_plan(p), testbed_of([replace(h, held=0) for h in hosts]))
        total = sum(h.slots for h in hosts)
        raise Held(
            f"experiment {p.experiment} does not fit in the slots other experiments leave on "
            f"the cluster ({taken} of its {total} node slots are held): swap one of them out, "
            "or try again when one has ended"
        ) from exc
    simulator = found.pop(SIMULATOR, None)
    if p.simulation is not None and simulator is not None:
        found |= {node: simulator for node in p.simulation.nodes}
    return found
