"""The mapping problem as plain data: a virtual topology and a physical testbed.

Every input (the IR, Emulab's `.top` and `.ptop`, a `hosts.yaml`) is read into these records;
the search (``nestbed.mapper.search``) and the checker (``nestbed.mapper.check``) read only
these. Bandwidths are in bits per second; a LAN is a hub whose members each carry their own
bandwidth, as Emulab's ``lan`` virtual node with one link per member.

Features and desires keep Emulab's names, prefix included (``?+cores``, ``*&shared``), because
a desire matches the feature of exactly the same name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

# A shaped link direction at full rate of full-size frames: what it costs a link emulator.
FRAME_BITS = 1500 * 8
# Emulab's weight at which an unmet desire or an unwanted feature is a violation.
VIOLATION_WEIGHT = 1.0
# Emulab's "*" slot count: as good as unlimited.
UNLIMITED_SLOTS = 10_000


class FeatureKind(Enum):
    PLAIN = "plain"  # a desire unmet, or a feature unwanted, costs its weight
    ADDITIVE = "additive"  # ?+ : the desires of a host's nodes add up to at most the feature
    ONE_IS_OKAY = "one is okay"  # *& : the first user is free, later users pay
    FIRST_PAYS = "first pays"  # *! : the first user pays, later users are free


def feature_kind(name: str) -> FeatureKind:
    if name.startswith("?+"):
        return FeatureKind.ADDITIVE
    if name.startswith("*&"):
        return FeatureKind.ONE_IS_OKAY
    if name.startswith("*!"):
        return FeatureKind.FIRST_PAYS
    return FeatureKind.PLAIN


@dataclass(frozen=True, slots=True)
class VirtualNode:
    """A node to place. ``types`` lists the hardware types it accepts (one, or a vclass's)."""

    name: str
    types: tuple[str, ...] = ("pc",)
    slots: int = 1
    desires: dict[str, float] = field(default_factory=dict)
    fixed: str | None = None
    subnode_of: str | None = None


@dataclass(frozen=True, slots=True)
class VirtualLink:
    """A point-to-point link; ``bandwidth_bps`` is the larger of its two directions."""

    name: str
    a: str
    b: str
    bandwidth_bps: int
    shaped: bool = True
    trivial_ok: bool = True  # may both ends share a host (Emulab: the trivial_ok flag)


@dataclass(frozen=True, slots=True)
class LanMember:
    node: str
    bandwidth_bps: int
    link: str  # the name of the member's link to the LAN (Emulab's top file names it)


@dataclass(frozen=True, slots=True)
class VirtualLan:
    name: str
    members: tuple[LanMember, ...]
    shaped: bool = True


@dataclass(frozen=True, slots=True)
class Topology:
    """The virtual side: nodes, links and LANs."""

    nodes: tuple[VirtualNode, ...]
    links: tuple[VirtualLink, ...] = ()
    lans: tuple[VirtualLan, ...] = ()
    name: str = "experiment"


@dataclass(frozen=True, slots=True)
class Host:
    """A machine. ``types`` are its dynamic types (it is one at a time) with their slots;
    ``static_types`` it always is. ``nic_bps`` is its uplink to ``switch``.
    ``trivial_bps`` bounds links between its own nodes (None: unbounded) and ``linkd_pps``
    the packets per second its link emulator carries (None: unbounded)."""

    name: str
    switch: str | None
    nic_bps: int
    types: dict[str, int] = field(default_factory=lambda: {"pc": 1})
    static_types: dict[str, int] = field(default_factory=dict)
    features: dict[str, float] = field(default_factory=dict)
    trivial_bps: int | None = None
    linkd_pps: int | None = None
    unique: bool = False
    subnode_of: str | None = None
    uplink: str = ""  # the physical link's name, for assign-style output
    cores: int = 0  # nodes are spread over this many cores (0: not said)


@dataclass(frozen=True, slots=True)
class Trunk:
    name: str
    a: str
    b: str
    bandwidth_bps: int


@dataclass(frozen=True, slots=True)
class Testbed:
    """The physical side: hosts, switches, trunks, and the ptop file's limits and policies."""

    hosts: tuple[Host, ...]
    switches: tuple[str, ...] = ()
    trunks: tuple[Trunk, ...] = ()
    type_limits: dict[str, int] = field(default_factory=dict)
    disallowed_desires: frozenset[str] = frozenset()
    desire_limits: dict[str, float] = field(default_factory=dict)


def pps_of(bandwidth_bps: int) -> float:
    """Packets per second one shaped direction at ``bandwidth_bps`` costs a link emulator."""
    return bandwidth_bps / FRAME_BITS
