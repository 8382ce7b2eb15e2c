"""Emulab's `assign` text formats: the virtual topology (`.top`), the physical testbed
(`.ptop`) and assign's solution (`Nodes:` … `End solution`), read and written.

The formats are those of assign's ``file_formats.txt``: bandwidths are in kb/s; a LAN is a
virtual node of type ``lan`` with one link per member; a ``switch`` node forwards, any other
node is a host (`node NAME TYPE:SLOTS… - FEATURE:VALUE… - FLAG…`). What nestbed reads but does
not use is listed in docs/mapper.md. Errors name the file's line.
"""

from __future__ import annotations

from collections.abc import Iterator

from nestbed.errors import UserError
from nestbed.mapper.problem import (
    UNLIMITED_SLOTS,
    Host,
    LanMember,
    Testbed,
    Topology,
    Trunk,
    VirtualLan,
    VirtualLink,
    VirtualNode,
)

KBPS = 1000
LINK_FLAGS = {"nodelay", "emulated", "trivial_ok"}
LINK_TAGS = ("fixsrciface:", "fixdstiface:")


def _lines(text: str, file: str) -> Iterator[tuple[str, list[str]]]:
    """Each line's place (`file:line`) and words; a node line has at least a name and type."""
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words and words[0] == "node" and len(words) < 3:
            raise UserError(f"{file}:{number}: a node line needs a name and a type")
        if words:
            yield f"{file}:{number}", words


def _number(word: str, what: str, where: str, kind: type = float) -> float:
    try:
        return kind(word)
    except ValueError:
        raise UserError(f"{where}: {what} {word!r} is not a number") from None


def _node_of(interface: str) -> str:
    """`pc1:eth0` or `pc1:(null)/eth0` → `pc1`; a bare name stays."""
    return interface.split(":", 1)[0]


# -- .top --------------------------------------------------------------------------------


def parse_top(text: str, file: str = "top") -> Topology:
    vclasses: dict[str, tuple[str, ...]] = {}
    nodes: dict[str, dict] = {}
    lan_names: list[str] = []
    links: list[tuple[str, str, str, int, bool, str]] = []
    fixed: dict[str, str] = {}
    for where, words in _lines(text, file):
        command = words[0]
        if command == "node":
            name, type_word = words[1], words[2]
            type_name, _, slots = type_word.partition(":")
            if type_name == "lan":
                lan_names.append(name)
                nodes[name] = {"lan": True}
                continue
            desires: dict[str, float] = {}
            subnode = None
            for word in words[3:]:
                key, colon, value = word.partition(":")
                if not colon:
                    if word == "disallow_trivial_mix":
                        continue
                    raise UserError(f"{where}: unknown node flag {word!r}")
                if key == "subnode_of":
                    subnode = value
                else:
                    desires[key] = _number(value, f"the weight of desire {key}", where)
            nodes[name] = {
                "types": vclasses.get(type_name, (type_name,)),
                "slots": int(_number(slots, "the slot count", where, int)) if slots else 1,
                "desires": desires,
                "subnode_of": subnode,
            }
        elif command == "link":
            if len(words) < 7:
                raise UserError(f"{where}: a link line needs a name, two ends and bw delay loss")
            bandwidth = _number(words[4].split(":")[0], "the bandwidth", where)
            trivial_ok = False
            for word in words[7:]:
                if word == "trivial_ok":
                    trivial_ok = True
                elif word in LINK_FLAGS or word.startswith(LINK_TAGS) or word.isalnum():
                    continue  # a link type (ethernet) or a flag nestbed does not need
                else:
                    raise UserError(f"{where}: unknown link flag {word!r}")
            links.append(
                (
                    words[1],
                    _node_of(words[2]),
                    _node_of(words[3]),
                    round(bandwidth * KBPS),
                    trivial_ok,
                    where,
                )
            )
        elif command == "make-vclass":
            if len(words) < 4:
                raise UserError(f"{where}: make-vclass needs a name, a weight and types")
            vclasses[words[1]] = tuple(words[3:])
        elif command == "fix-node":
            if len(words) != 3:
                raise UserError(f"{where}: fix-node needs a virtual and a physical node")
            fixed[words[1]] = words[2]
        elif command == "node-hint":
            continue  # a suggestion only; the mapper does not take hints
        else:
            raise UserError(f"{where}: unknown directive {command!r}")
    members: dict[str, list[LanMember]] = {name: [] for name in lan_names}
    plain: list[VirtualLink] = []
    for name, a, b, bps, trivial_ok, where in links:
        for end in (a, b):
            if end not in nodes:
                raise UserError(f"{where}: link {name} names node {end}, not defined")
        if a in members and b in members:
            raise UserError(f"{where}: link {name} joins two LANs")
        if a in members or b in members:
            lan, node = (a, b) if a in members else (b, a)
            members[lan].append(LanMember(node, bps, name))
        else:
            plain.append(VirtualLink(name, a, b, bps, shaped=False, trivial_ok=trivial_ok))
    virtual = tuple(
        VirtualNode(
            name,
            types=spec["types"],
            slots=spec["slots"],
            desires=spec["desires"],
            fixed=fixed.get(name),
            subnode_of=spec["subnode_of"],
        )
        for name, spec in nodes.items()
        if "lan" not in spec
    )
    lans = tuple(VirtualLan(name, tuple(members[name]), shaped=False) for name in lan_names)
    return Topology(virtual, tuple(plain), lans)


def write_top(topology: Topology) -> str:
    lines: list[str] = []
    vclasses: dict[tuple[str, ...], str] = {}
    for node in topology.nodes:
        if len(node.types) > 1 and node.types not in vclasses:
            vclasses[node.types] = f"vclass{len(vclasses)}"
            lines.append(f"make-vclass {vclasses[node.types]} 0.5 {' '.join(node.types)}")
    for node in topology.nodes:
        type_name = vclasses.get(node.types, node.types[0])
        words = ["node", node.name, f"{type_name}:{node.slots}" if node.slots != 1 else type_name]
        words += [f"{d}:{w:g}" for d, w in sorted(node.desires.items())]
        if node.subnode_of:
            words.append(f"subnode_of:{node.subnode_of}")
        lines.append(" ".join(words))
    for lan in topology.lans:
        lines.append(f"node {lan.name} lan")
    for link in topology.links:
        flags = " trivial_ok" if link.trivial_ok else ""
        lines.append(
            f"link {link.name} {link.a} {link.b} {_kbps(link.bandwidth_bps)} 0 0 ethernet{flags}"
        )
    for lan in topology.lans:
        for m in lan.members:
            lines.append(f"link {m.link} {m.node} {lan.name} {_kbps(m.bandwidth_bps)} 0 0 ethernet")
    for node in topology.nodes:
        if node.fixed:
            lines.append(f"fix-node {node.name} {node.fixed}")
    return "\n".join(lines) + "\n"


def _kbps(bps: int) -> str:
    return f"{bps / KBPS:.15g}"


# -- .ptop -------------------------------------------------------------------------------


def parse_ptop(text: str, file: str = "ptop") -> Testbed:
    hosts: dict[str, dict] = {}
    switches: list[str] = []
    trunks: list[Trunk] = []
    limits: dict[str, int] = {}
    disallowed: set[str] = set()
    desire_limits: dict[str, float] = {}
    for where, words in _lines(text, file):
        command = words[0]
        if command == "node":
            name = words[1]
            sections: list[list[str]] = [[]]
            for word in words[2:]:
                if word == "-":
                    sections.append([])
                else:
                    sections[-1].append(word)
            types_, features, flags = (sections + [[], []])[:3]
            dynamic: dict[str, int] = {}
            static: dict[str, int] = {}
            for word in types_:
                type_name, _, count = word.partition(":")
                slots = (
                    UNLIMITED_SLOTS
                    if count == "*"
                    else int(_number(count or "1", "the slot count", where, int))
                )
                if type_name.startswith("*"):
                    static[type_name[1:]] = slots
                else:
                    dynamic[type_name] = slots
            if "switch" in dynamic:
                switches.append(name)
                continue
            feature_values: dict[str, float] = {}
            for word in features:
                key, _, value = word.partition(":")
                feature_values[key] = _number(value or "0", f"the cost of feature {key}", where)
            spec: dict = {
                "types": dynamic,
                "static": static,
                "features": feature_values,
                "trivial": None,
                "subnode_of": None,
                "unique": False,
                "nic": 0,
                "switch": None,
                "uplink": "",
            }
            for word in flags:
                key, _, value = word.partition(":")
                if key == "trivial_bw":
                    spec["trivial"] = round(_number(value, "trivial_bw", where) * KBPS)
                elif key == "subnode_of":
                    spec["subnode_of"] = value
                elif key == "unique":
                    spec["unique"] = True
                else:
                    raise UserError(f"{where}: unknown node flag {word!r}")
            hosts[name] = spec
        elif command == "link":
            if len(words) < 7:
                raise UserError(f"{where}: a link line needs a name, two ends and bw delay loss")
            a, b = _node_of(words[2]), _node_of(words[3])
            bps = round(_number(words[4], "the bandwidth", where) * KBPS)
            if bps <= 0:
                raise UserError(f"{where}: link {words[1]} has no bandwidth; give it kb/s")
            for end in (a, b):
                if end not in hosts and end not in switches:
                    raise UserError(f"{where}: link {words[1]} names node {end}, not defined")
            if a in switches and b in switches:
                trunks.append(Trunk(words[1], a, b, bps))
            elif a in switches or b in switches:
                host, switch = (b, a) if a in switches else (a, b)
                spec = hosts[host]
                if spec["switch"] not in (None, switch):
                    raise UserError(
                        f"{where}: host {host} is wired to switches {spec['switch']} and "
                        f"{switch}; the mapper takes one switch per host"
                    )
                spec["switch"] = switch
                spec["nic"] += bps
                spec["uplink"] = spec["uplink"] or words[1]
            else:
                raise UserError(
                    f"{where}: link {words[1]} joins hosts {a} and {b} directly; "
                    "the mapper places links on switches only"
                )
        elif command == "set-type-limit":
            if len(words) != 3:
                raise UserError(f"{where}: set-type-limit needs a type and a number")
            limits[words[1]] = int(_number(words[2], "the type limit", where, int))
        elif command == "policy":
            if len(words) < 4 or words[1] != "desire" or words[3] not in ("disallow", "limit"):
                raise UserError(
                    f"{where}: write `policy desire NAME disallow` or `policy desire NAME limit X`"
                )
            if words[3] == "disallow":
                disallowed.add(words[2])
            elif len(words) != 5:
                raise UserError(f"{where}: a desire limit needs its value")
            else:
                desire_limits[words[2]] = _number(words[4], "the desire limit", where)
        else:
            raise UserError(f"{where}: unknown directive {command!r}")
    return Testbed(
        hosts=tuple(
            Host(
                name,
                spec["switch"],
                spec["nic"],
                types=spec["types"],
                static_types=spec["static"],
                features=spec["features"],
                trivial_bps=spec["trivial"],
                unique=spec["unique"],
                subnode_of=spec["subnode_of"],
                uplink=spec["uplink"],
            )
            for name, spec in hosts.items()
        ),
        switches=tuple(switches),
        trunks=tuple(trunks),
        type_limits=limits,
        disallowed_desires=frozenset(disallowed),
        desire_limits=desire_limits,
    )


def write_ptop(testbed: Testbed) -> str:
    named = [*testbed.switches, *(h.switch for h in testbed.hosts if h.switch)]
    named += [end for t in testbed.trunks for end in (t.a, t.b)]
    lines = [f"node {s} switch:1 *lan:*" for s in dict.fromkeys(named)]
    for host in testbed.hosts:
        types = [f"{t}:{_slots(n)}" for t, n in host.types.items()]
        types += [f"*{t}:{_slots(n)}" for t, n in host.static_types.items()]
        features = [f"{f}:{v:g}" for f, v in sorted(host.features.items())]
        flags = []
        if host.trivial_bps is not None:
            flags.append(f"trivial_bw:{_kbps(host.trivial_bps)}")
        if host.subnode_of:
            flags.append(f"subnode_of:{host.subnode_of}")
        if host.unique:
            flags.append("unique")
        lines.append(" ".join(["node", host.name, *types, "-", *features, "-", *flags]).rstrip())
    for host in testbed.hosts:
        if host.switch:
            lines.append(
                f"link {host.uplink or 'link-' + host.name} {host.name}:(null)/eth0 "
                f"{host.switch}:(null)/(null) {_kbps(host.nic_bps)} 0 0 ethernet"
            )
    for trunk in testbed.trunks:
        lines.append(
            f"link {trunk.name} {trunk.a}:(null)/(null) {trunk.b}:(null)/(null) "
            f"{_kbps(trunk.bandwidth_bps)} 0 0 ethernet"
        )
    lines += [f"set-type-limit {t} {n}" for t, n in sorted(testbed.type_limits.items())]
    lines += [f"policy desire {d} disallow" for d in sorted(testbed.disallowed_desires)]
    lines += [f"policy desire {d} limit {v:g}" for d, v in sorted(testbed.desire_limits.items())]
    return "\n".join(lines) + "\n"


def _slots(n: int) -> str:
    return "*" if n >= UNLIMITED_SLOTS else str(n)
