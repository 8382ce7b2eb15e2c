"""What an event may say: the verbs of each kind of object and their arguments.

One table and one check, used by the front ends for the file's events and by the controller
for events sent to a live experiment (`nestbed event`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from nestbed.model.ir import Experiment, Link, Queue
from nestbed.units import UnitError, parse_bandwidth, parse_delay, parse_probability

LINK_VERBS: dict[str, int | None] = {
    "up": 0,
    "down": 0,
    "reset": 0,
    "bandwidth": 1,
    "delay": 1,
    "plr": 1,
    "queue-set": 3,
}
# kind -> verb -> number of arguments (None: any number)
VERBS: dict[str, dict[str, int | None]] = {
    "link": LINK_VERBS,
    "lan": LINK_VERBS,
    "node": {},
    "agent": {"set": 2},
    "cbr": {"start": 0, "stop": 0, "reset": 0, "set": 2},
    "ftp": {"start": 0, "stop": 0, "produce": 1, "send": 1},
    "program": {"start": 0, "run": 0, "stop": 0, "kill": None, "set": 2},
    "ns": {
        "halt": 0,
        "terminate": 0,
        "swapout": 0,
        "log": None,
        "message": None,
        "linktest": None,
    },
    "timeline": {"start": 0, "stop": 0, "reset": 0, "run": 0},
    "sequence": {"start": 0, "stop": 0, "reset": 0, "run": 0},
}
LINKTEST_LEVELS = ("1", "2", "3", "4")
LINKTEST_DEFAULT = 3
CBR_VARS = {"packetSize_", "rate_", "interval_", "maxpkts_", "random_"}
PROGRAM_VARS = {"command", "dir", "timeout", "expected-exit-code"}
QUEUE_VARS = {
    "limit_",
    "queue-in-bytes_",
    "thresh_",
    "maxthresh_",
    "q_weight_",
    "linterm_",
    "gentle_",
    "mean_pktsize_",
}
_UNITS: dict[str, Callable[[str], object]] = {
    "bandwidth": parse_bandwidth,
    "delay": parse_delay,
    "plr": parse_probability,
}


def object_kinds(exp: Experiment) -> dict[str, str]:
    """Every object an event can name, with its kind (groups are ``group``)."""
    kinds = {"ns": "ns"}
    kinds |= {n.name: "node" for n in exp.nodes}
    kinds |= {link.name: "link" for link in exp.links}
    kinds |= {lan.name: "lan" for lan in exp.lans}
    kinds |= {a.name: "agent" for a in exp.agents}
    kinds |= {a.name: a.kind for a in exp.applications}
    kinds |= {p.name: "program" for p in exp.programs}
    kinds |= {t.name: "timeline" for t in exp.timelines}
    kinds |= {s.name: "sequence" for s in exp.sequences}
    kinds |= {g.name: "group" for g in exp.groups}
    return kinds


def check_action(
    kinds: Mapping[str, str],
    groups: Mapping[str, Sequence[str]],
    link_members: Mapping[str, Sequence[str]],
    obj: str,
    verb: str,
    args: Sequence[str],
) -> list[tuple[str, str]]:
    """Problems with ``OBJECT VERB ARGS`` as (field, message); field is object, verb or args.

    ``groups`` maps group names to members; ``link_members`` link and LAN names to the names
    of their member nodes.
    """
    kind = kinds.get(obj)
    if kind is None:
        return [
            (
                "object",
                f"event {obj} {verb}: there is no object named '{obj}'; events act on nodes, "
                "links, LANs, agents, applications, programs, timelines, sequences, groups or ns",
            )
        ]
    members = list(groups.get(obj, ())) if kind == "group" else [obj]
    if kind == "group":
        member_kinds = {kinds[m] for m in members if m in kinds}
        kind = member_kinds.pop() if len(member_kinds) == 1 else "group"
    verbs = VERBS.get(kind, {})
    label = f"event {obj} {verb}"
    if verb not in verbs:
        valid = ", ".join(sorted(verbs)) or "none"
        return [
            ("verb", f"{label}: '{verb}' is not a verb of {kind} {obj}; valid verbs are {valid}")
        ]
    count = verbs[verb]
    if count is not None and len(args) != count:
        return [
            ("args", f"{label}: takes {count} argument{'s' if count != 1 else ''}, got {len(args)}")
        ]
    problems = []
    parse = _UNITS.get(verb)
    if kind in ("link", "lan") and parse:
        try:
            parse(args[0])
        except UnitError as exc:
            problems.append(("args", f"{label}: {exc}"))
    if verb == "set":
        allowed = {"cbr": CBR_VARS, "program": PROGRAM_VARS}.get(kind)
        if allowed and args[0] not in allowed:
            problems.append(
                (
                    "args",
                    f"{label}: '{args[0]}' cannot be set on {kind} {obj}; use one of "
                    f"{', '.join(sorted(allowed))}",
                )
            )
    if verb == "linktest" and (len(args) > 1 or (args and args[0] not in LINKTEST_LEVELS)):
        problems.append(
            ("args", f"{label}: takes an optional level, 1 to 4 (default {LINKTEST_DEFAULT})")
        )
    if verb == "queue-set":
        nodes = [n for m in members for n in link_members.get(m, ())]
        if args[0] not in nodes:
            problems.append(
                (
                    "args",
                    f"{label}: '{args[0]}' is not a member of {kind} {obj}; name the node whose "
                    "outgoing queue to change",
                )
            )
        if args[1] not in QUEUE_VARS:
            problems.append(
                (
                    "args",
                    f"{label}: '{args[1]}' is not a queue parameter; use one of "
                    f"{', '.join(sorted(QUEUE_VARS))}",
                )
            )
    return problems


def check_event(exp: Experiment, obj: str, verb: str, args: Sequence[str]) -> list[str]:
    """The messages of :func:`check_action` for an event sent to a live experiment."""
    groups = {g.name: g.members for g in exp.groups}
    members = {link.name: [p.node for p in link.ports] for link in exp.all_links}
    return [m for _, m in check_action(object_kinds(exp), groups, members, obj, verb, args)]


_QUEUE_FIELDS: dict[str, tuple[str, Callable[[str], object]]] = {
    "limit_": ("limit", int),
    "thresh_": ("thresh", float),
    "maxthresh_": ("maxthresh", float),
    "q_weight_": ("q_weight", float),
    "linterm_": ("linterm", float),
    "mean_pktsize_": ("mean_packet_size_bytes", int),
}


def _truth(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _queue_set(queue: Queue, var: str, value: str) -> Queue:
    if var == "queue-in-bytes_":
        return queue.model_copy(update={"limit_unit": "bytes" if _truth(value) else "packets"})
    if var == "gentle_":
        kind = queue.kind if queue.kind == "droptail" else ("gred" if _truth(value) else "red")
        return queue.model_copy(update={"kind": kind})
    field, convert = _QUEUE_FIELDS[var]
    return Queue.model_validate({**queue.model_dump(), field: convert(value)})


def link_after_event(link: Link, original: Link, verb: str, args: Sequence[str]) -> Link:
    """The link's shaping after a (checked) link event, as Emulab's delay agent applies it.

    ``bandwidth``, ``delay`` and ``plr`` set both directions (a LAN's halves by the same rule
    as in the file, see :func:`lan_halves`); ``queue-set NODE VAR VALUE`` changes that node's
    outgoing queue; ``reset`` restores the file's shaping; ``up`` and ``down`` change nothing
    here (they are the link's state, not its shaping).
    """
    if verb == "reset":
        return original
    if verb in ("up", "down"):
        return link
    ports = []
    for port in link.ports:
        egress, ingress = port.egress, port.ingress
        if verb == "queue-set":
            if port.node == args[0]:
                egress = egress.model_copy(update={"queue": _queue_set(egress.queue, *args[1:])})
        else:
            update: dict[str, object]
            if verb == "bandwidth":
                update = {"bandwidth_bps": parse_bandwidth(args[0])}
            elif verb == "delay":
                delay = parse_delay(args[0])
                update = {"delay_s": delay / 2 if link.kind == "lan" else delay}
            else:  # plr
                loss = parse_probability(args[0])
                half = 1 - math.sqrt(1 - loss) if link.kind == "lan" else loss
                update = {"loss": half, "gilbert_elliott": None}
            egress = egress.model_copy(update=update)
            if link.kind == "lan":
                ingress = ingress.model_copy(update=update)
        ports.append(port.model_copy(update={"egress": egress, "ingress": ingress}))
    return link.model_copy(update={"ports": tuple(ports)})
