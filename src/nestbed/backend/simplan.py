"""The simulated part of an experiment (`make-simulated`), as nestbed-sim reads it; pure.

Simulated nodes get no namespace: they, the links and LANs among them, and their routes live
in one nestbed-sim process per experiment (ns-3's real-time simulator, `csrc/nestbed-sim`). A
point-to-point link between an emulated and a simulated node is an *attachment*: the emulated
node's interface is a veth whose far end is in the fabric namespace, where nestbed-sim reads
and writes its frames through an AF_PACKET socket (an ns-3 FdNetDevice on the simulated node).
A shaped attachment passes through nestbed-linkd on the way, like any shaped link.

Routes are nestbed's own (the shortest paths of `plan.static_routes` over the whole
experiment, or the file's manual routes), so simulated routers reach the emulated subnets
behind an attachment as the emulated nodes reach the simulated ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nestbed.errors import UserError
from nestbed.model.formulas import default_queue_packets
from nestbed.model.simulated import (
    bernoulli_loss,
    command_on_simulated,
    gaps,
    node_gaps,
    rate_and_delay,
)

if TYPE_CHECKING:
    # The IR's models load only where one is built, not where a kept plan is read.
    from nestbed.model import Experiment, Link, Port, Shaping
    from nestbed.model.ir import GilbertElliott

# The lag behind real time a run may have before it is marked (nse's HardLimit, 5 ms).
DEFAULT_HARD_LIMIT_S = 0.005
# Sysctls of the emulated nodes of an experiment with simulated ones (a node's own win): no
# duplicate SACKs from Linux, whose blocks make ns-3 3.44's SACK scoreboard fail one of its
# own assertions (tcp-tx-buffer.cc:857) and end nestbed-sim.
EMULATED_SYSCTLS = {"net.ipv4.tcp_dsack": "0"}


@dataclass(frozen=True)
class Attachment:
    """An emulated node's link to a simulated node, as nestbed-sim's FdNetDevice sees it."""

    link: str
    node: str  # the emulated node
    simulated_node: str
    address: str  # the simulated node's "A.B.C.D/LEN" on the link
    ifname: str  # the fabric interface nestbed-sim's socket is bound to
    # The largest IP packet its interface carries (None: Ethernet's 1500); less where a
    # cluster's VXLAN carries it, and ns-3 fragments what is larger.
    mtu: int | None = None


@dataclass(frozen=True)
class Simulation:
    """Everything nestbed-sim builds, in the order it must build it."""

    nodes: tuple[str, ...]
    links: tuple[str, ...]  # p2p and lan statements
    attachments: tuple[Attachment, ...]
    routes: tuple[tuple[str, str, str], ...]  # (node, destination or "default", next hop)
    hard_limit_s: float = DEFAULT_HARD_LIMIT_S
    traffic: tuple[str, ...] = ()  # cbr statements (so far only bench/hybrid.py gives them)

    @property
    def link_names(self) -> tuple[str, ...]:
        """The simulated links and LANs (the second word of their statements)."""
        return tuple(statement.split()[1] for statement in self.links)

    def tables(self) -> dict[str, list[tuple[str, str]]]:
        """Each simulated node's routes, (destination or "default", next hop)."""
        found: dict[str, list[tuple[str, str]]] = {node: [] for node in self.nodes}
        for node, destination, via in self.routes:
            found[node].append((destination, via))
        return found

    def description(self, fds: Mapping[str, int], control_fd: int | None = None) -> str:
        """nestbed-sim's input, given the file descriptor of each attachment (by link) and
        of the listening socket it takes commands on."""
        lines = [f"hard_limit_s {self.hard_limit_s}"]
        if control_fd is not None:
            lines.append(f"control {control_fd}")
        lines += [f"node {n}" for n in self.nodes]
        lines += self.links
        lines += [
            f"attach {a.link} {a.simulated_node} {a.address} {fds[a.link]}"
            + ("" if a.mtu is None else f" {a.mtu}")
            for a in self.attachments
        ]
        lines += [
            f"route {node} {'0.0.0.0/0' if destination == 'default' else destination} {via}"
            for node, destination, via in self.routes
        ]
        lines += self.traffic
        return "\n".join([*lines, "end"]) + "\n"


def cbr(
    name: str,
    node: str,
    to: str,
    *,
    port: int,
    packet_bytes: int,
    rate_bps: int,
    start_s: float = 0.0,
    stop_s: float = 0.0,
) -> str:
    """A simulated UDP source at a constant rate from ``node`` to address ``to`` (a sink is
    put on the simulated node that owns it), from ``start_s`` to ``stop_s`` (0: never) of
    the simulator's time."""
    return f"cbr {name} {node} {to} {port} {packet_bytes} {rate_bps} {start_s!r} {stop_s!r}"


def simulated_nodes(exp: Experiment) -> set[str]:
    return {n.name for n in exp.nodes if n.simulated}


def is_attachment(link: Link, simulated: set[str]) -> bool:
    """Whether ``link`` joins emulated nodes to simulated ones (refused unless it is one
    emulated and one simulated node on a point-to-point link: see ``check``)."""
    members = {p.node in simulated for p in link.ports}
    return members == {True, False}


def is_simulated(link: Link, simulated: set[str]) -> bool:
    return all(p.node in simulated for p in link.ports)


def check(exp: Experiment) -> None:
    """One UserError naming everything of the simulated part nestbed-sim cannot run (the
    front ends refuse a simulated link's options with their place in the file first; this
    is for experiments built otherwise)."""
    simulated = simulated_nodes(exp)
    if not simulated:
        return
    problems = []
    for link in exp.all_links:
        if is_attachment(link, simulated) and link.kind == "lan":
            problems.append(
                f"LAN {link.name} mixes emulated and simulated nodes; join an emulated node "
                "to a simulated one with a duplex-link"
            )
        elif is_simulated(link, simulated):
            problems += [gap.sentence for gap in gaps(link)]
    problems += [gap.sentence for n in exp.nodes if n.simulated for gap in node_gaps(n)]
    problems += [command_on_simulated(f"program {p.name}", p.node) for p in exp.programs
                 if p.node in simulated]  # fmt: skip
    if problems:
        raise UserError("; ".join(problems))


def _loss(sender: Shaping, receiver: Shaping) -> str:
    """nestbed-sim's loss word for one direction of a link: its Gilbert-Elliott chain
    (``gaps`` leaves no other loss beside one), or the Bernoulli loss of both halves; then the
    sender's ordinals to drop (a link's receiving half has none)."""
    ge = sender.gilbert_elliott or receiver.gilbert_elliott
    return _loss_word(ge, bernoulli_loss(sender, receiver), sender.drop_ordinals)


def _loss_word(ge: GilbertElliott | None, bernoulli: float, ordinals: tuple[int, ...]) -> str:
    word = repr(bernoulli)
    if ge is not None:
        word = "ge/" + "/".join(repr(v) for v in (ge.p, ge.r, ge.loss_bad, ge.loss_good))
    if ordinals:
        word += "@" + ",".join(str(n) for n in ordinals)
    return word


def _queue(s: Shaping, rate_bps: int, delay_s: float) -> str:
    """A direction's queue: its limit, the file's (`50` packets, `6000B` bytes, counted as
    linkd counts them: each packet as an Ethernet frame) or linkd's default for its rate
    and delay; then, for RED, `/red/` or `/gred/` and ns-2's THRESH/MAXTHRESH/Q_WEIGHT/
    LINTERM/MEAN_PKTSIZE, and 1 when its average is in bytes, as linkd's is when the queue's
    unit is, limit or not (nestbed-sim runs linkd's own RED)."""
    q = s.queue
    if q.limit and q.limit_unit == "bytes":
        word = f"{q.limit}B"
    else:
        word = str(q.limit or default_queue_packets(rate_bps, delay_s))
    if q.kind == "droptail":
        return word
    red = (q.thresh, q.maxthresh, q.q_weight, q.linterm, q.mean_packet_size_bytes)
    in_bytes = "1" if q.limit_unit == "bytes" else "0"
    return "/".join([word, "gred" if q.gentle else "red", *(repr(v) for v in red), in_bytes])


def _cidr(link: Link, node: str) -> str:
    return str(link.port(node).interface)


def _shaping(port: Port, link: Link) -> tuple[Shaping, Shaping]:
    """The port's egress and ingress, none of it on a link that is not shaped."""
    if link.noshaping:
        from nestbed.model import Shaping

        return Shaping(), Shaping()
    return port.egress, port.ingress


def _jitter(sender: Shaping, receiver: Shaping) -> str:
    """nestbed-sim's jitter word for one direction (``gaps`` leaves at most one half with
    jitter)."""
    s = sender if sender.jitter_s else receiver
    if not s.jitter_s:
        return "0"
    return f"{s.jitter_s!r}/{s.jitter_distribution}/{int(s.reorder)}"


def _mangle(sender: Shaping, receiver: Shaping) -> str:
    """nestbed-sim's mangle word for one direction: DUPLICATE/CORRUPT (``gaps`` leaves each
    to at most one half)."""
    duplicate = sender.duplicate or receiver.duplicate
    corrupt = sender.corrupt or receiver.corrupt
    return f"{duplicate!r}/{corrupt!r}" if duplicate or corrupt else "0"


def _p2p_parameters(link: Link) -> str:
    """RATE_A RATE_B DELAY QUEUE_A QUEUE_B LOSS_A LOSS_B [JITTER_A JITTER_B [MANGLE_A
    MANGLE_B]] of a point-to-point link (A, B: its ports; ``gaps`` has checked that both ways
    have one delay); the jitters only where either way has one or a mangle follows."""
    (a_out, a_in), (b_out, b_in) = (_shaping(p, link) for p in link.ports)
    rate_ab, delay = rate_and_delay(a_out, b_in)
    rate_ba, _ = rate_and_delay(b_out, a_in)
    queues = f"{_queue(a_out, rate_ab, delay)} {_queue(b_out, rate_ba, delay)}"
    words = f"{rate_ab} {rate_ba} {delay!r} {queues} {_loss(a_out, b_in)} {_loss(b_out, a_in)}"
    tail = [_jitter(a_out, b_in), _jitter(b_out, a_in), _mangle(a_out, b_in), _mangle(b_out, a_in)]
    while tail[-2:] == ["0", "0"]:
        del tail[-2:]
    return " ".join([words, *tail])


def _pipe(s: Shaping) -> str:
    """A LAN member's pipe, one half of its shaping (egress or ingress): RATE DELAY QUEUE LOSS
    JITTER MANGLE, as linkd's pipe of that half on an emulated LAN."""
    rate, delay = s.bandwidth_bps, s.delay_s
    none = type(s)()
    words = [str(rate), repr(delay), _queue(s, rate, delay),
             _loss_word(s.gilbert_elliott, s.loss, s.drop_ordinals),
             _jitter(s, none), _mangle(s, none)]  # fmt: skip
    return " ".join(words)


def _lan_pipes(link: Link) -> list[str]:
    """Each member's EGRESS INGRESS pipes: its ways to and from the LAN's switch."""
    return [" ".join(_pipe(s) for s in _shaping(port, link)) for port in link.ports]


def _statement(link: Link) -> str:
    if link.kind == "link":
        a, b = link.ports
        ends = f"{a.node} {_cidr(link, a.node)} {b.node} {_cidr(link, b.node)}"
        return f"p2p {link.name} {ends} {_p2p_parameters(link)}"
    members = " ".join(f"{p.node} {_cidr(link, p.node)} {pipes}"
                       for p, pipes in zip(link.ports, _lan_pipes(link), strict=True))  # fmt: skip
    return f"lan {link.name} {members}"


def settings(link: Link) -> str:
    """The nestbed-sim command that gives a simulated link (or LAN) the shaping ``link``
    has now, after events changed it; a UserError for what simulated links do not have."""
    problems = gaps(link)
    if problems:
        raise UserError(problems[0].sentence)
    if link.kind == "link":
        return f"p2p-set {link.name} {_p2p_parameters(link)}"
    return f"lan-set {link.name} {' '.join(_lan_pipes(link))}"


def simulation(
    exp: Experiment,
    routes: Mapping[str, list[tuple[str, str]]],
    attachment_ifnames: Mapping[str, str],
) -> Simulation | None:
    """The simulated part of ``exp`` (None when it has none).

    ``routes``: each simulated node's (destination, next hop) routes, "default" included;
    ``attachment_ifnames``: the fabric interface of each attachment, by link.
    """
    simulated = simulated_nodes(exp)
    if not simulated:
        return None
    nodes = tuple(n.name for n in exp.nodes if n.simulated)
    links = tuple(_statement(link) for link in exp.all_links if is_simulated(link, simulated))
    attachments = []
    for link in exp.all_links:
        if not is_attachment(link, simulated):
            continue
        inside = next(p.node for p in link.ports if p.node in simulated)
        outside = next(p.node for p in link.ports if p.node not in simulated)
        attachments.append(
            Attachment(
                link.name, outside, inside, _cidr(link, inside), attachment_ifnames[link.name]
            )
        )
    table = tuple((node, *route) for node in nodes for route in routes.get(node, ()))
    limit = exp.simulation_hard_limit_s or DEFAULT_HARD_LIMIT_S
    return Simulation(nodes, links, tuple(attachments), table, hard_limit_s=limit)
