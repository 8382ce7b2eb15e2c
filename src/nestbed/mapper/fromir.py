"""An experiment's IR as a mapping problem.

A node wants its hardware type (``tb-set-hardware``, default ``pc``), its host when fixed
(``tb-fix-node``), and its CPU quota and memory limit as additive desires (``?+cores``,
``?+memory_bytes``) against the host's cores and memory. A link or LAN member weighs the larger
of its two directions' bandwidth; an unlimited one weighs ``UNLIMITED_ESTIMATE_BPS``, Emulab's
default link speed. The IR carries no Emulab desires or features (``tb-add-node-desire`` is
not recorded), so none are read from it.
"""

from __future__ import annotations

from nestbed.mapper.hostsfile import CORES, MEMORY
from nestbed.mapper.problem import LanMember, Topology, VirtualLan, VirtualLink, VirtualNode
from nestbed.model.ir import Experiment, Port

UNLIMITED_ESTIMATE_BPS = 100_000_000


def _rate(port: Port) -> int:
    rate = max(port.egress.bandwidth_bps, port.ingress.bandwidth_bps)
    return rate or UNLIMITED_ESTIMATE_BPS


def desires(cpu_cores: float | None, memory_bytes: int | None) -> dict[str, float]:
    """A node's additive desires: its CPU quota and memory limit, where it has them."""
    found: dict[str, float] = {}
    if cpu_cores is not None:
        found[CORES] = cpu_cores
    if memory_bytes is not None:
        found[MEMORY] = float(memory_bytes)
    return found


def topology_of(experiment: Experiment) -> Topology:
    nodes = []
    for node in experiment.nodes:
        nodes.append(
            VirtualNode(
                node.name,
                types=(node.hardware_type or "pc",),
                desires=desires(node.cpu_cores, node.memory_bytes),
                fixed=node.fixed_host,
            )
        )
    links = []
    for link in experiment.links:
        a, b = link.ports
        links.append(
            VirtualLink(link.name, a.node, b.node, max(_rate(a), _rate(b)), shaped=link.is_shaped)
        )
    lans = [
        VirtualLan(
            lan.name,
            tuple(LanMember(p.node, _rate(p), f"{lan.name}-{p.node}") for p in lan.ports),
            shaped=lan.is_shaped,
        )
        for lan in experiment.lans
    ]
    return Topology(tuple(nodes), tuple(links), tuple(lans), name=experiment.name)
