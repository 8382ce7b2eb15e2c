"""The intermediate representation (IR) of an experiment: plain, typed, validated, immutable.

Every front end (ns-2 Tcl, YAML, Python) resolves into an ``Experiment``; every later layer
(store, mapper, back ends, simulator) reads only this. Units live in field names; probabilities
are in [0, 1]; names and addresses are fully resolved, so the same file always yields the same
IR, byte for byte (see ``Experiment.to_json``).
"""

from __future__ import annotations

import ipaddress
import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from nestbed.model.base import NAME_PATTERN, OBJECT_NAME_PATTERN, Frozen
from nestbed.model.formulas import stationary_loss

IR_VERSION = 1

Name = Field(pattern=NAME_PATTERN)
ObjectName = Field(pattern=OBJECT_NAME_PATTERN)
Probability = Field(ge=0.0, le=1.0)
JitterDistribution = Literal["uniform", "normal", "pareto", "paretonormal"]
QueueKind = Literal["droptail", "red", "gred"]
RoutingMode = Literal["none", "static", "session", "manual"]
AgentKind = Literal["udp", "tcp", "null", "tcpsink"]
ApplicationKind = Literal["cbr", "ftp"]


class Where(Frozen):
    """A place in an experiment file."""

    file: str
    line: int | None = None


class GilbertElliott(Frozen):
    """Two-state loss: p = P(good→bad), r = P(bad→good), loss probability in each state."""

    p: float = Probability
    r: float = Probability
    loss_bad: float = Field(default=1.0, ge=0.0, le=1.0)
    loss_good: float = Field(default=0.0, ge=0.0, le=1.0)

    @property
    def loss_rate(self) -> float:
        """Stationary loss probability."""
        return stationary_loss(self.p, self.r, self.loss_bad, self.loss_good)


class Queue(Frozen):
    """A pipe's queue. ``limit`` None means derived from the bandwidth-delay product by linkd."""

    kind: QueueKind = "droptail"
    limit: int | None = Field(default=None, ge=1)
    limit_unit: Literal["packets", "bytes"] = "packets"
    # RED / gentle RED parameters, with ns-2's names and defaults (used when kind != droptail).
    thresh: float = Field(default=5.0, ge=0)
    maxthresh: float = Field(default=15.0, ge=0)
    q_weight: float = Field(default=0.002, gt=0, le=1)
    linterm: float = Field(default=10.0, ge=1)
    mean_packet_size_bytes: int = Field(default=500, ge=1)

    @property
    def gentle(self) -> bool:
        return self.kind == "gred"

    @model_validator(mode="after")
    def _thresholds(self) -> Queue:
        if self.kind != "droptail" and self.maxthresh < self.thresh:
            raise ValueError(
                f"RED maxthresh {self.maxthresh} is below thresh {self.thresh}; "
                "set maxthresh_ at least as large as thresh_"
            )
        return self


class Shaping(Frozen):
    """What one direction of one port does to packets. All zeros means unshaped."""

    bandwidth_bps: int = Field(default=0, ge=0, description="0 means unlimited")
    delay_s: float = Field(default=0.0, ge=0.0)
    jitter_s: float = Field(default=0.0, ge=0.0)
    jitter_distribution: JitterDistribution = "uniform"
    reorder: bool = False
    loss: float = Field(default=0.0, ge=0.0, le=1.0, description="Bernoulli loss probability")
    gilbert_elliott: GilbertElliott | None = None
    drop_ordinals: tuple[int, ...] = ()
    duplicate: float = Field(default=0.0, ge=0.0, le=1.0)
    corrupt: float = Field(default=0.0, ge=0.0, le=1.0)
    queue: Queue = Queue()

    @field_validator("drop_ordinals")
    @classmethod
    def _ordinals(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(n < 1 for n in value):
            raise ValueError("packet ordinals to drop start at 1")
        return tuple(sorted(set(value)))

    @property
    def is_shaped(self) -> bool:
        """True when this direction needs the link emulator."""
        return (
            self.bandwidth_bps > 0
            or self.delay_s > 0
            or self.jitter_s > 0
            or self.loss > 0
            or self.gilbert_elliott is not None
            or bool(self.drop_ordinals)
            or self.duplicate > 0
            or self.corrupt > 0
        )


def lan_halves(base: Shaping) -> tuple[Shaping, Shaping]:
    """Splits member-to-member LAN shaping into the node→switch and switch→node halves.

    Delay D becomes D/2 each way and loss P becomes 1-sqrt(1-P) each way (Emulab's rule), so a
    packet between two members sees D and P. Bandwidth applies to both halves. Jitter, the
    Gilbert-Elliott model, duplication and corruption act once, on the sending half.
    """
    half_loss = 1 - math.sqrt(1 - base.loss) if base.loss else 0.0
    egress = base.model_copy(update={"delay_s": base.delay_s / 2, "loss": half_loss})
    ingress = Shaping(
        bandwidth_bps=base.bandwidth_bps,
        delay_s=base.delay_s / 2,
        loss=half_loss,
        queue=base.queue,
    )
    return egress, ingress


class Port(Frozen):
    """A node's membership in a link or LAN: its address and both directions of shaping.

    ``egress`` acts on packets from the node into the link (for a LAN: node to switch);
    ``ingress`` on packets from the link to the node (LAN only: switch to node). A packet from
    member A to member B passes A's egress and then B's ingress.
    """

    node: str = Name
    ip: str
    netmask: str
    cost: int = Field(default=1, ge=1)
    egress: Shaping = Shaping()
    ingress: Shaping = Shaping()

    @property
    def interface(self) -> ipaddress.IPv4Interface:
        return ipaddress.IPv4Interface(f"{self.ip}/{self.netmask}")


class Link(Frozen):
    """A point-to-point link (two ports) or a LAN (two or more ports on one switch)."""

    name: str = Name
    kind: Literal["link", "lan"]
    ports: tuple[Port, ...]
    subnet: str
    noshaping: bool = False
    simulated: bool = False

    @property
    def is_shaped(self) -> bool:
        return not self.noshaping and any(
            p.egress.is_shaped or p.ingress.is_shaped for p in self.ports
        )

    def port(self, node: str) -> Port:
        for port in self.ports:
            if port.node == node:
                return port
        raise KeyError(node)


class Route(Frozen):
    """One route installed on a node: destination prefix via a next-hop address."""

    destination: str
    via: str
    destination_object: str | None = None
    via_node: str | None = None


class Node(Frozen):
    """A host or router of the experiment."""

    name: str = Name
    hardware_type: str | None = None
    os: str | None = None
    startcmd: str | None = None
    cpu_cores: float | None = Field(default=None, gt=0, description="CPU quota in cores")
    cpu_pin: tuple[int, ...] = ()
    memory_bytes: int | None = Field(default=None, gt=0)
    fixed_host: str | None = Field(default=None, description="placement hint (tb-fix-node)")
    simulated: bool = False
    sysctls: dict[str, str] = {}
    routes: tuple[Route, ...] = ()


class Agent(Frozen):
    """A transport endpoint on a node (ns-2 Agent)."""

    name: str = ObjectName
    kind: AgentKind
    variant: str | None = None
    node: str = Name
    peer: str | None = None
    params: dict[str, str] = {}


class Application(Frozen):
    """A traffic source driving an agent (ns-2 Application)."""

    name: str = ObjectName
    kind: ApplicationKind
    agent: str = ObjectName
    packet_size_bytes: int = Field(default=210, ge=1)
    rate_bps: int = Field(default=100_000_000, ge=0)
    interval_s: float | None = Field(default=None, gt=0, description="overrides rate_bps")
    max_packets: int | None = Field(default=None, ge=0)
    random: bool = False


class Program(Frozen):
    """A command run inside a node (Emulab program object)."""

    name: str = ObjectName
    node: str = Name
    command: str
    dir: str | None = None
    timeout_s: float | None = Field(default=None, gt=0)
    expected_exit_code: int = 0


class Action(Frozen):
    """What an event does: OBJECT VERB ARGS, as in `$ns at T "$link0 down"`."""

    object: str
    verb: str
    args: tuple[str, ...] = ()
    where: Where | None = None


class Event(Action):
    """An action at a time in seconds from the start of its timeline."""

    time_s: float = Field(ge=0)


class Timeline(Frozen):
    """Events that run relative to the timeline's own start event."""

    name: str = ObjectName
    events: tuple[Event, ...] = ()


class Sequence(Frozen):
    """Actions run one after the other, each waiting for the previous to finish."""

    name: str = ObjectName
    steps: tuple[Action, ...] = ()


class Group(Frozen):
    """Objects of one kind addressed together by events."""

    name: str = ObjectName
    members: tuple[str, ...]


class Inert(Frozen):
    """A command recorded from the file that has no effect in nestbed (warned about)."""

    command: str
    args: tuple[str, ...] = ()
    where: Where | None = None


class Warning(Frozen):  # noqa: A001 - the domain's word; never confused with builtins here
    """A warning about the file, with its place."""

    message: str
    where: Where | None = None


class Source(Frozen):
    """Which file the IR came from."""

    format: Literal["ns", "yaml", "python"]
    file: str
    sha256: str


class Experiment(Frozen):
    """An experiment: the whole IR."""

    ir_version: Literal[1] = IR_VERSION
    name: str = Name
    source: Source | None = None
    routing: RoutingMode = "none"
    nodes: tuple[Node, ...] = ()
    links: tuple[Link, ...] = ()
    lans: tuple[Link, ...] = ()
    agents: tuple[Agent, ...] = ()
    applications: tuple[Application, ...] = ()
    programs: tuple[Program, ...] = ()
    events: tuple[Event, ...] = ()
    timelines: tuple[Timeline, ...] = ()
    sequences: tuple[Sequence, ...] = ()
    groups: tuple[Group, ...] = ()
    env: dict[str, str] = {}
    parameters: dict[str, str] = {}
    # The lag behind real time the simulated part may have before a run is marked (ns-2's
    # `Scheduler/RealTime set maxslop_`, ns-3's HardLimit); None: nestbed's default, 5 ms.
    simulation_hard_limit_s: float | None = Field(default=None, gt=0)
    inert: tuple[Inert, ...] = ()
    warnings: tuple[Warning, ...] = ()

    def to_json(self) -> str:
        """Canonical JSON: the same experiment always gives the same bytes."""
        return self.model_dump_json(indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Experiment:
        return cls.model_validate_json(text)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    @property
    def all_links(self) -> tuple[Link, ...]:
        return self.links + self.lans

    def addresses(self) -> dict[str, list[str]]:
        """Each node's IP addresses, in the order of its links."""
        found: dict[str, list[str]] = {}
        for link in self.all_links:
            for port in link.ports:
                if port.ip:
                    found.setdefault(port.node, []).append(port.ip)
        return found
