"""The experiment document: the YAML file format, and what every front end produces first.

A document says what the user wrote, with human units (`10Mb`, `20ms`) and names; the resolver
(``nestbed.spec.resolve``) turns it into the IR. The ns-2 front end translates a Tcl script into
a document, so both file formats share one meaning and one set of checks. Its JSON Schema is
``schemas/experiment.schema.json``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nestbed.model.base import Frozen

Bandwidth = str | int | float
Delay = str | int | float
Time = str | int | float
Value = str | int | float | bool


class GilbertDoc(Frozen):
    """Gilbert-Elliott loss, either as (p, r, loss_bad, loss_good) or (loss_rate, burst_length).

    loss_bad is 1-h and loss_good 1-k in the usual notation. With loss_rate and burst_length
    (mean number of packets lost in a row), p = PLR·Q/(1-PLR) and r = Q = 1/burst_length.
    """

    p: float | None = None
    r: float | None = None
    loss_bad: float | None = None
    loss_good: float | None = None
    loss_rate: float | None = None
    burst_length: float | None = None


class QueueDoc(Frozen):
    """A queue: DropTail, RED or gentle RED (gred), with ns-2's parameter meanings."""

    type: Literal["droptail", "red", "gred"] | None = None
    limit: int | None = None
    limit_unit: Literal["packets", "bytes"] | None = None
    thresh: float | None = None
    maxthresh: float | None = None
    q_weight: float | None = None
    linterm: float | None = None
    mean_packet_size: int | None = None


class ShapingDoc(Frozen):
    """Shaping of one direction; every field left out keeps the value from the level above."""

    bandwidth: Bandwidth | None = None
    delay: Delay | None = None
    loss: float | str | None = None
    jitter: Delay | None = None
    jitter_distribution: Literal["uniform", "normal", "pareto", "paretonormal"] | None = None
    reorder: bool | None = None
    gilbert_elliott: GilbertDoc | None = None
    drop_packets: list[int] | None = None
    duplicate: float | None = None
    corrupt: float | None = None
    queue: QueueDoc | None = None


class MemberDoc(Frozen):
    """A node in a link or LAN, with its address, cost and per-direction overrides.

    On a link, egress is the direction from this node to the other one. On a LAN, egress is
    node to switch and ingress switch to node (each half of the member-to-member path).
    """

    node: str
    ip: str | None = None
    cost: int | None = None
    egress: ShapingDoc | None = None
    ingress: ShapingDoc | None = None


class LinkDoc(ShapingDoc):
    """A link (exactly two members) or LAN (two or more).

    The shaping fields at this level are what a packet from one member to another sees: on a
    LAN, delay D and loss P are split between the two halves of the path (D/2 each, and
    1-sqrt(1-P) each), as Emulab does.
    """

    name: str | None = None
    members: list[str | MemberDoc]
    netmask: str | None = None
    noshaping: bool | None = None
    simulated: bool | None = None


class RouteDoc(Frozen):
    """A manual route: to a node, link, LAN or CIDR prefix, via a node or address."""

    dst: str
    via: str


class NodeDoc(Frozen):
    """A node."""

    name: str
    hardware: str | None = None
    os: str | None = None
    startcmd: str | None = None
    cpu: float | None = Field(default=None, description="CPU quota in cores")
    cpu_pin: list[int] | None = None
    memory: str | int | None = None
    fix: str | None = Field(default=None, description="placement hint (tb-fix-node)")
    simulated: bool | None = None
    sysctls: dict[str, Value] | None = None
    routes: list[RouteDoc] | None = None


class AgentDoc(Frozen):
    """A transport agent: udp, tcp (variant reno, newreno, sack, fulltcp, ...), null, tcpsink."""

    name: str
    type: Literal["udp", "tcp", "null", "tcpsink"]
    variant: str | None = None
    node: str
    peer: str | None = None
    params: dict[str, Value] | None = None


class ApplicationDoc(Frozen):
    """A traffic application on an agent: cbr or ftp."""

    name: str
    type: Literal["cbr", "ftp"]
    agent: str
    packet_size: int | str | None = None
    rate: Bandwidth | None = None
    interval: Delay | None = None
    max_packets: int | None = None
    random: bool | None = None


class ProgramDoc(Frozen):
    """A program object: a command run in a node when an event starts it."""

    name: str
    node: str
    command: str
    dir: str | None = None
    timeout: Delay | None = None
    expected_exit_code: int | None = None


class ActionDoc(Frozen):
    """OBJECT VERB ARGS."""

    object: str
    verb: str
    args: list[Value] | None = None


class EventDoc(ActionDoc):
    """An action at a time (seconds, or 1h20m3s)."""

    at: Time


class TimelineDoc(Frozen):
    name: str
    events: list[EventDoc] = []


class SequenceDoc(Frozen):
    name: str
    steps: list[ActionDoc] = []


class GroupDoc(Frozen):
    name: str
    members: list[str]


class InertDoc(Frozen):
    """A command kept from an ns file that has no effect here."""

    command: str
    args: list[str] = []


class SimulationDoc(Frozen):
    """The simulated part's settings (nodes marked ``simulated: true``)."""

    # The lag behind real time a run may have before it is marked (`5ms`; ns-2's
    # `Scheduler/RealTime set maxslop_`); nestbed's default is 5 ms.
    hard_limit: Delay | None = None


class ExperimentDoc(Frozen):
    """A whole experiment file."""

    name: str | None = None
    routing: Literal["none", "static", "session", "manual"] | None = None
    simulation: SimulationDoc | None = None
    env: dict[str, Value] | None = None
    parameters: dict[str, Value] | None = None
    nodes: list[NodeDoc] = []
    links: list[LinkDoc] = []
    lans: list[LinkDoc] = []
    agents: list[AgentDoc] = []
    applications: list[ApplicationDoc] = []
    programs: list[ProgramDoc] = []
    events: list[EventDoc] = []
    timelines: list[TimelineDoc] = []
    sequences: list[SequenceDoc] = []
    groups: list[GroupDoc] = []
    inert: list[InertDoc] = []
