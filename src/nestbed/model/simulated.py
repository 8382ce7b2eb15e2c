"""What a simulated link (or LAN) between simulated nodes can do of what its options ask.

nestbed-sim's links are ns-3 point-to-point links and CSMA LANs with queue limits in packets
or bytes, RED (linkd's own, linked into nestbed-sim), Bernoulli and Gilbert-Elliott loss and
drops by ordinal, and jitter, duplication and corruption on point-to-point links, as linkd
does them. Every other option would mean something else
there or nothing, so it is refused, never ignored: by the front ends with its place in the
file (``spec.resolve``), and by the back end when an event asks for it during a run
(``backend.simplan``). Links between an emulated and a simulated node pass through linkd and
can do everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Pure functions of the models' values: a kept plan's back end calls them without
    # loading the models.
    from nestbed.model.ir import Link, Node, Shaping


@dataclass(frozen=True)
class Gap:
    """One thing a simulated link asks for that it cannot do."""

    sentence: str  # the whole refusal, naming the link and the fix
    option: str  # the option's name in the file (jitter, queue, ...), for its place
    member: int | None = None  # the port whose own shaping asks for it, if one does


_FIX = "remove it or move the {kind} out of make-simulated"


def _options(s: Shaping, lan: bool, ingress: bool) -> list[tuple[str, str]]:
    """(option, what) of one direction's shaping (a port's ingress or egress) that simulated
    links do not have."""
    found = []
    if lan and s.jitter_s:
        found.append(("jitter", "jitter on a LAN"))
    if lan and s.duplicate:
        found.append(("duplicate", "duplication on a LAN"))
    if lan and s.corrupt:
        found.append(("corrupt", "corruption on a LAN"))
    # A LAN member's queue decides the drops by ordinal and the Gilbert-Elliott loss of what
    # it sends, as its egress pipe does; nothing decides on the way into a member but the
    # LAN's own loss, drawn where each member receives.
    if lan and ingress and s.drop_ordinals:
        found.append(("drop_packets", "drops by ordinal on the way into a LAN member"))
    if lan and ingress and s.gilbert_elliott is not None:
        found.append(("gilbert_elliott", "Gilbert-Elliott loss on the way into a LAN member"))
    return found


def rate_and_delay(sender: Shaping, receiver: Shaping) -> tuple[int, float]:
    """Rate and delay from one port to another: the sender's egress, then the receiver's
    ingress."""
    rates = [r for r in (sender.bandwidth_bps, receiver.bandwidth_bps) if r]
    return (min(rates) if rates else 0), sender.delay_s + receiver.delay_s


def bernoulli_loss(sender: Shaping, receiver: Shaping) -> float:
    """The Bernoulli loss of both halves of a direction together."""
    return sender.loss + receiver.loss - sender.loss * receiver.loss


def gaps(link: Link) -> list[Gap]:
    """Everything simulated ``link`` asks for that nestbed-sim does not do, each once."""
    if link.noshaping:
        return []  # an unshaped link, simulated or not, ignores its shaping
    lan = link.kind == "lan"
    fix = _FIX.format(kind=link.kind)
    found: dict[str, Gap] = {}
    for j, port in enumerate(link.ports):
        for s, ingress in ((port.egress, False), (port.ingress, True)):
            for option, what in _options(s, lan, ingress):
                sentence = (
                    f"simulated {link.kind} {link.name} asks for {what}, which simulated links "
                    f"do not have yet; {fix}"
                )
                found.setdefault(what, Gap(sentence, option, j))
    pairs = [(a, b) for a in link.ports for b in link.ports if a is not b]
    for a, b in pairs:
        halves = (a.egress, b.ingress)
        if all(h.jitter_s for h in halves):
            found.setdefault(
                "two jitters",
                Gap(
                    f"simulated {link.kind} {link.name} has jitter on both halves of the way "
                    f"from {a.node} to {b.node}; give that direction one jitter",
                    "jitter",
                ),
            )
        for option, what in (("duplicate", "duplication"), ("corrupt", "corruption")):
            if all(getattr(h, option) for h in halves):
                found.setdefault(
                    f"two {option}",
                    Gap(
                        f"simulated {link.kind} {link.name} has {what} on both halves of the "
                        f"way from {a.node} to {b.node}; give that direction one",
                        option,
                    ),
                )
        if sum(1 for h in halves if h.loss or h.gilbert_elliott) > 1 and any(
            h.gilbert_elliott for h in halves
        ):
            found.setdefault(
                "two losses",
                Gap(
                    f"simulated {link.kind} {link.name} has Gilbert-Elliott loss and another "
                    f"loss from {a.node} to {b.node}; give that direction one loss model",
                    "gilbert_elliott",
                ),
            )
    if not lan and len(link.ports) == 2:
        a, b = link.ports
        there = a.egress.delay_s + b.ingress.delay_s
        back = b.egress.delay_s + a.ingress.delay_s
        if abs(there - back) > 1e-9:
            found["delays"] = Gap(
                f"simulated link {link.name} has delay {there * 1e3:g} ms one way and "
                f"{back * 1e3:g} ms the other; a simulated link has one delay: give both "
                "directions the same or move the link out of make-simulated",
                "delay",
            )
    if lan:
        first = link.ports[0]
        between = _member_pair(first.egress, first.ingress)
        if any(_member_pair(p.egress, p.ingress) != between for p in link.ports):
            found["members"] = Gap(
                f"simulated LAN {link.name} gives its members different bandwidths, delays, "
                "loss rates or queues on the way in; a simulated LAN has one of each: set "
                "them on the LAN, not on its members, or move it out of make-simulated",
                "members",
            )
    return list(found.values())


def node_gaps(node: Node) -> list[Gap]:
    """What simulated ``node`` is given that it cannot have: it is an ns-3 node inside
    nestbed-sim, with no namespace, cgroup or operating system of its own, so a limit or a
    command there would do nothing."""
    found = []
    limits = [("cpu", node.cpu_cores is not None, "a CPU limit"),
              ("cpu_pin", bool(node.cpu_pin), "CPU pinning"),
              ("memory", node.memory_bytes is not None, "a memory limit"),
              ("sysctls", bool(node.sysctls), "sysctls")]  # fmt: skip
    for option, given, what in limits:
        if given:
            found.append(Gap(
                f"simulated node {node.name} has {what}, which only an emulated node (a "
                f"namespace and its cgroup) has; remove it or move the node out of "
                "make-simulated",
                option,
            ))  # fmt: skip
    if node.startcmd:
        found.append(Gap(command_on_simulated(f"the startcmd of {node.name}", node.name),
                         "startcmd"))  # fmt: skip
    return found


def command_on_simulated(what: str, node: str) -> str:
    """The refusal of a command (a program, a startcmd) on a simulated node."""
    return (
        f"{what} is on simulated node {node}, which has no operating system to run it; put "
        "it on an emulated node"
    )


def _member_pair(egress: Shaping, ingress: Shaping) -> tuple[object, ...]:
    """What a LAN member's halves give a packet between two members (one member's egress and
    another's ingress are the same halves as its own two when all members are alike). The
    queue of what each member sends is its own, as on an emulated LAN."""
    return (*rate_and_delay(egress, ingress), bernoulli_loss(egress, ingress), ingress.queue)
