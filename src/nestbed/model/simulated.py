"""What a simulated link (or LAN) between simulated nodes can do of what its options ask.

nestbed-sim's links are ns-3 point-to-point links, and its LANs members' links to a switch
(as linkd builds an emulated LAN), with queue limits in packets or bytes, RED (linkd's own,
linked into nestbed-sim), Bernoulli and Gilbert-Elliott loss and drops by ordinal, and
jitter, duplication and corruption, as linkd does them. A LAN member's pipes are its own,
each half (egress, ingress) with all of these; a point-to-point link has one delay, and
each of its directions one jitter, one duplication, one corruption and one loss model where
Gilbert-Elliott is in it, from either half. Anything else would mean something else there
or nothing, so it is refused, never ignored: by the front ends with its place in the file
(``spec.resolve``), and by the back end when an event asks for it during a run
(``backend.simplan``). Links between an emulated and a simulated node pass through linkd
and can do everything.
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
    if link.kind == "lan":
        return []  # each half of each member is a pipe of its own, as on an emulated LAN
    found: dict[str, Gap] = {}
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
    if len(link.ports) == 2:  # (the front end refuses a link of other than two members)
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
