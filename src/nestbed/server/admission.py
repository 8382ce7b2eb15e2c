"""Admission control: whether an experiment fits on the machine beside the experiments already
live on it, or which resource it lacks, in one sentence. Pure: the server hands in the IR, the
machine's facts and the live experiments' demands.

An experiment's demand is read through the mapper's capacity model (``nestbed.mapper``), as if
all of it went on one host: a node's CPU quota and memory limit are its ``?+cores`` and
``?+memory_bytes`` desires (``mapper.fromir``), and every shaped link direction costs the link
emulator a full-rate stream of full-size frames (``mapper.problem.pps_of``), both directions on
the one host, as ``mapper.check`` counts a link whose ends share a host.

CPU is the resource a shared machine overcommits, and the default is deliberately plain:

* a node **with** a CPU quota reserves its quota whole (``quota_overcommit`` 1.0). The quota is
  what its experimenter asked for to get faithful timing; promising it twice breaks that.
* a node **without** a quota is counted as ``1 / nodes_per_core`` of a core, with the mapper's
  own packing of 8 nodes per core (``mapper.hostsfile.SLOTS_PER_CORE``). Such nodes are mostly
  idle — a shell, a sink, a router whose forwarding the kernel does in softirq time charged to
  no node — and Emulab packs its shared virtual nodes the same way. A node that runs something
  CPU-bound should be given a quota, and is then reserved whole.

Memory: a node's limit is reserved whole; a node without one is estimated at
``node_memory_bytes``; the host keeps ``host_memory_reserve_bytes`` for itself (kernel, server,
link emulators). The link emulator's packet rate and the loopback bandwidth are checked only
where the machine's description gives them (``linkd_pps``, ``trivial_bps`` in hosts.yaml);
otherwise the decision lists them as unchecked rather than pretending.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from nestbed.backend.plan import evented_links
from nestbed.errors import UserError
from nestbed.mapper.fromir import topology_of
from nestbed.mapper.hostsfile import CORES, MEMORY, SLOTS_PER_CORE
from nestbed.mapper.problem import UNLIMITED_SLOTS, Host, Topology, pps_of
from nestbed.model import Experiment
from nestbed.units import format_bandwidth

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionPolicy:
    """How much of each resource one experiment's nodes are counted for (module docstring)."""

    nodes_per_core: float = float(SLOTS_PER_CORE)  # nodes without a CPU quota, per core
    quota_overcommit: float = 1.0  # CPU quota cores promised per core of the machine
    node_memory_bytes: int = 64 * MIB  # estimate for a node without a memory limit
    host_memory_reserve_bytes: int = 1 * GIB  # kept for the host itself

    def __post_init__(self) -> None:
        for name in ("nodes_per_core", "quota_overcommit", "node_memory_bytes"):
            value = getattr(self, name)
            if not value > 0:
                raise UserError(f"admission setting {name} must be above 0, not {value}")
        if self.host_memory_reserve_bytes < 0:
            raise UserError("admission setting host_memory_reserve_bytes must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    """What one experiment takes from the machine while it is swapped in, before any policy
    (so a policy changed later applies to live experiments too). Serialisable with asdict."""

    nodes: int = 0
    namespaces: int = 0  # the nodes' and, with any LAN or shaped link, the fabric's
    quota_cores: float = 0.0  # the CPU quotas, summed
    unquoted_nodes: int = 0  # nodes without a CPU quota
    memory_limit_bytes: int = 0  # the memory limits, summed
    unlimited_memory_nodes: int = 0  # nodes without a memory limit
    linkd_pps: float = 0.0  # packets/s the link emulator carries at the links' full rate
    loopback_bps: int = 0  # bandwidth between the nodes, looped back inside the host

    def __add__(self, other: Demand) -> Demand:
        return Demand(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Demand:
        return cls(**data)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFacts:
    """The machine's capacity. None: not known, so not checked."""

    cores: int
    memory_bytes: int
    linkd_pps: int | None = None
    loopback_bps: int | None = None
    max_nodes: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether the experiment fits now; if not, the resource it lacks and one sentence."""

    fits: bool
    reason: str = ""
    lacking: str | None = None  # "nodes", "cores", "memory", "packet rate", "loopback bandwidth"
    fits_empty: bool = True  # whether it would fit with nothing else live (else: refuse, not queue)
    unchecked: tuple[str, ...] = ()  # resources whose capacity is not known


def demand_of(experiment: Experiment) -> Demand:
    """The experiment's demand on one host, through the mapper's model of it."""
    topology = topology_of(experiment)
    nodes = topology.nodes
    # Swap-in sends a link that events act on through the link emulator even when unshaped
    # (backend.plan), which the mapper's model does not know.
    evented = evented_links(experiment)
    pps, loopback = _one_host_links(topology, evented)
    fabric = bool(topology.lans) or any(link.shaped or link.name in evented
                                        for link in topology.links)  # fmt: skip
    return Demand(
        nodes=len(nodes),
        namespaces=len(nodes) + int(fabric),
        quota_cores=sum(n.desires.get(CORES, 0.0) for n in nodes),
        unquoted_nodes=sum(CORES not in n.desires for n in nodes),
        memory_limit_bytes=int(sum(n.desires.get(MEMORY, 0.0) for n in nodes)),
        unlimited_memory_nodes=sum(MEMORY not in n.desires for n in nodes),
        linkd_pps=pps,
        loopback_bps=loopback,
    )


def _one_host_links(topology: Topology, evented: set[str]) -> tuple[float, int]:
    """The link emulator's packet rate and the looped-back bandwidth with every node on one
    host, counted as ``mapper.check.evaluate`` counts links and LANs that stay on a host."""
    pps, loopback = 0.0, 0
    for link in topology.links:
        emulated = link.shaped or link.name in evented
        pps += 2 * pps_of(link.bandwidth_bps) if emulated else 0.0
        loopback += link.bandwidth_bps
    for lan in topology.lans:
        emulated = lan.shaped or lan.name in evented
        for member in lan.members:
            pps += 2 * pps_of(member.bandwidth_bps) if emulated else 0.0
            loopback += member.bandwidth_bps
    return pps, loopback


def machine_capacity(measured: Mapping[str, Any], host: Host | None = None) -> HostFacts:
    """The machine's capacity from what was measured on it (``results.manifest.host_facts()``:
    ``cpus``, ``memory_bytes``) and, when given, its description in hosts.yaml
    (``mapper.hostsfile.parse_hosts``), whose cores and memory win and which alone says the
    link emulator's packet rate, the loopback bandwidth and the node slots."""
    cores = int(measured["cpus"])
    memory = int(measured["memory_bytes"])
    if host is None:
        return HostFacts(cores=cores, memory_bytes=memory)
    described_memory = host.features.get(MEMORY)
    slots = sum(host.types.values()) + sum(host.static_types.values())
    return HostFacts(
        cores=host.cores or cores,
        memory_bytes=int(described_memory)
        if described_memory is not None and math.isfinite(described_memory)
        else memory,
        linkd_pps=host.linkd_pps,
        loopback_bps=host.trivial_bps,
        max_nodes=slots if 0 < slots < UNLIMITED_SLOTS else None,
    )


@dataclass(frozen=True, slots=True)
class _Check:
    resource: str
    need: float
    used: float
    have: float | None
    show: Any  # formats an amount
    detail: str  # how the need was counted ("" when plain)
    unit: str = ""  # after a formatted capacity, where ``show`` gives none


def admit(
    name: str,
    demand: Demand,
    capacity: HostFacts,
    live: Iterable[Demand] = (),
    policy: AdmissionPolicy | None = None,
) -> Decision:
    """Whether experiment ``name`` with ``demand`` fits on the machine beside ``live``."""
    policy = policy or AdmissionPolicy()
    used = sum(live, Demand())
    memory_have = max(capacity.memory_bytes - policy.host_memory_reserve_bytes, 0)
    checks = [
        _Check("nodes", demand.nodes, used.nodes, capacity.max_nodes, _count, "", " node slots"),
        _Check("cores", _cores(demand, policy), _cores(used, policy), float(capacity.cores),
               _number, _cores_detail(demand, policy), " cores"),
        _Check("memory", _memory(demand, policy), _memory(used, policy), memory_have, _size,
               _memory_detail(demand, policy)),
        _Check("packet rate", demand.linkd_pps, used.linkd_pps, capacity.linkd_pps, _pps,
               "at its shaped links' full rate of full-size frames", " packets/s"),
        _Check("loopback bandwidth", demand.loopback_bps, used.loopback_bps,
               capacity.loopback_bps, _bps, "between its nodes"),
    ]  # fmt: skip
    # Without a slot count the nodes are bounded by the cores they are counted for.
    unchecked = tuple(
        c.resource for c in checks if c.have is None and c.need > 0 and c.resource != "nodes"
    )
    known = [c for c in checks if c.have is not None]
    never = next((c for c in known if _over(c.need, c.have)), None)
    if never is not None:
        return Decision(False, _never(name, never), never.resource, False, unchecked)
    short = next((c for c in known if _over(c.used + c.need, c.have)), None)
    if short is not None:
        return Decision(False, _short(name, short), short.resource, True, unchecked)
    return Decision(True, unchecked=unchecked)


def _cores(d: Demand, policy: AdmissionPolicy) -> float:
    return d.quota_cores / policy.quota_overcommit + d.unquoted_nodes / policy.nodes_per_core


def _memory(d: Demand, policy: AdmissionPolicy) -> float:
    return float(d.memory_limit_bytes + d.unlimited_memory_nodes * policy.node_memory_bytes)


def _over(amount: float, limit: float | None) -> bool:
    return limit is not None and amount > limit * (1 + 1e-9) + 1e-9


def _detail(limited: int, limited_how: str, unlimited: int, unlimited_how: str) -> str:
    """How a need was counted: "4 with … and 8 without …", leaving out an empty side."""
    sides = ((limited, limited_how), (unlimited, unlimited_how))
    return " and ".join(f"{n} {how}" for n, how in sides if n)


def _cores_detail(d: Demand, policy: AdmissionPolicy) -> str:
    return _detail(
        d.nodes - d.unquoted_nodes, f"with CPU quotas of {_number(d.quota_cores)} cores in all",
        d.unquoted_nodes, f"without a quota at {_number(policy.nodes_per_core)} per core",
    )  # fmt: skip


def _memory_detail(d: Demand, policy: AdmissionPolicy) -> str:
    return _detail(
        d.nodes - d.unlimited_memory_nodes, f"with limits of {_size(d.memory_limit_bytes)} in all",
        d.unlimited_memory_nodes, f"without a limit at {_size(policy.node_memory_bytes)} each",
    )  # fmt: skip


def _what(c: _Check) -> str:
    if c.resource == "cores":
        return f"{_number(c.need)} cores' worth of nodes"
    if c.resource == "nodes":
        return f"{_count(c.need)} nodes"
    if c.resource == "memory":
        return f"{_size(c.need)} of memory"
    if c.resource == "packet rate":
        return f"its link emulator to carry {_pps(c.need)} packets/s"
    return f"{_bps(c.need)} looped back"


def _needs(name: str, c: _Check) -> str:
    detail = f" ({c.detail})" if c.detail else ""
    return f"experiment {name} needs {_what(c)}{detail}"


_FIX = {
    "nodes": "use fewer nodes",
    "cores": "give its nodes smaller CPU quotas or use fewer nodes",
    "memory": "give its nodes smaller memory limits or use fewer nodes",
    "packet rate": "give its links lower bandwidths",
    "loopback bandwidth": "give its links lower bandwidths",
}


def _never(name: str, c: _Check) -> str:
    assert c.have is not None
    return (
        f"{_needs(name, c)} but the machine has only {c.show(c.have)}{c.unit}; {_FIX[c.resource]}"
    )


def _short(name: str, c: _Check) -> str:
    assert c.have is not None
    left = max(c.have - c.used, 0.0)
    return (
        f"{_needs(name, c)} but {c.show(left)} of the machine's {c.show(c.have)}{c.unit} "
        "are left; "
        "wait for other experiments to swap out, or queue it as a batch experiment"
    )


def _number(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _count(x: float) -> str:
    return f"{x:.0f}"


def _size(x: float) -> str:
    return f"{x / GIB:.1f} GiB" if x >= GIB else f"{x / MIB:.0f} MiB"


def _pps(x: float) -> str:
    return f"{x:,.0f}".replace(",", " ")


def _bps(x: float) -> str:
    return format_bandwidth(round(x)) + "/s"
