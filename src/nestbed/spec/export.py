"""Writing an experiment back out: IR → document (YAML) and document → ns-2 Tcl.

Both directions are exact: resolving what is written here yields the same IR again, which the
round-trip tests check for every example. What ns-2 syntax cannot say is refused with a reason.
"""

from __future__ import annotations

import math

from nestbed.errors import UserError
from nestbed.model import ir
from nestbed.model.ir import lan_halves
from nestbed.spec import document as doc
from nestbed.units import format_bandwidth, format_delay, format_time

_DEFAULT_QUEUE = ir.Queue()


def to_document(exp: ir.Experiment) -> doc.ExperimentDoc:
    """A document that resolves to ``exp`` (names, addresses and every shaping field kept)."""
    return doc.ExperimentDoc(
        name=exp.name,
        routing=exp.routing if exp.routing != "none" else None,
        simulation=(
            doc.SimulationDoc(hard_limit=format_delay(exp.simulation_hard_limit_s))
            if exp.simulation_hard_limit_s is not None
            else None
        ),
        env=dict(exp.env) or None,
        parameters=dict(exp.parameters) or None,
        nodes=[_node(n) for n in exp.nodes],
        links=[_link(link) for link in exp.links],
        lans=[_link(lan) for lan in exp.lans],
        agents=[
            doc.AgentDoc(
                name=a.name,
                type=a.kind,
                variant=a.variant,
                node=a.node,
                peer=a.peer,
                params=dict(a.params) or None,
            )
            for a in exp.agents
        ],
        applications=[_application(a) for a in exp.applications],
        programs=[
            doc.ProgramDoc(
                name=p.name,
                node=p.node,
                command=p.command,
                dir=p.dir,
                timeout=format_delay(p.timeout_s) if p.timeout_s else None,
                expected_exit_code=p.expected_exit_code or None,
            )
            for p in exp.programs
        ],
        events=[_event(e) for e in exp.events],
        timelines=[
            doc.TimelineDoc(name=t.name, events=[_event(e) for e in t.events])
            for t in exp.timelines
        ],
        sequences=[
            doc.SequenceDoc(
                name=s.name,
                steps=[
                    doc.ActionDoc(object=a.object, verb=a.verb, args=list(a.args) or None)
                    for a in s.steps
                ],
            )
            for s in exp.sequences
        ],
        groups=[doc.GroupDoc(name=g.name, members=list(g.members)) for g in exp.groups],
        inert=[doc.InertDoc(command=x.command, args=list(x.args)) for x in exp.inert],
    )


def _node(n: ir.Node) -> doc.NodeDoc:
    return doc.NodeDoc(
        name=n.name,
        hardware=n.hardware_type,
        os=n.os,
        startcmd=n.startcmd,
        cpu=n.cpu_cores,
        cpu_pin=list(n.cpu_pin) or None,
        memory=n.memory_bytes,
        fix=n.fixed_host,
        simulated=n.simulated or None,
        sysctls=dict(n.sysctls) or None,
        routes=[
            doc.RouteDoc(dst=r.destination_object or r.destination, via=r.via_node or r.via)
            for r in _unique_routes(n.routes)
        ]
        or None,
    )


def _unique_routes(routes: tuple[ir.Route, ...]) -> list[ir.Route]:
    # A route to a node expands to one route per interface; write the node once.
    seen, out = set(), []
    for r in routes:
        key = (r.destination_object or r.destination, r.via_node or r.via)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _shaping_fields(s: ir.Shaping) -> dict:
    """The document fields of ``s`` that differ from an unshaped direction."""
    out: dict = {}
    if s.bandwidth_bps:
        out["bandwidth"] = format_bandwidth(s.bandwidth_bps)
    if s.delay_s:
        out["delay"] = format_delay(s.delay_s)
    if s.loss:
        out["loss"] = s.loss
    if s.jitter_s:
        out["jitter"] = format_delay(s.jitter_s)
    if s.jitter_distribution != "uniform":
        out["jitter_distribution"] = s.jitter_distribution
    if s.reorder:
        out["reorder"] = True
    if s.gilbert_elliott:
        g = s.gilbert_elliott
        out["gilbert_elliott"] = doc.GilbertDoc(
            p=g.p, r=g.r, loss_bad=g.loss_bad, loss_good=g.loss_good
        )
    if s.drop_ordinals:
        out["drop_packets"] = list(s.drop_ordinals)
    if s.duplicate:
        out["duplicate"] = s.duplicate
    if s.corrupt:
        out["corrupt"] = s.corrupt
    if s.queue != _DEFAULT_QUEUE:
        out["queue"] = doc.QueueDoc(**_queue_fields(s.queue, _DEFAULT_QUEUE))
    return out


# Document field -> IR field of a queue.
_QUEUE_FIELDS = {
    "type": "kind",
    "limit": "limit",
    "limit_unit": "limit_unit",
    "thresh": "thresh",
    "maxthresh": "maxthresh",
    "q_weight": "q_weight",
    "linterm": "linterm",
    "mean_packet_size": "mean_packet_size_bytes",
}


def _queue_fields(q: ir.Queue, default: ir.Queue) -> dict:
    """The document fields of ``q`` that differ from ``default``."""
    return {
        key: getattr(q, attr)
        for key, attr in _QUEUE_FIELDS.items()
        if getattr(q, attr) != getattr(default, attr)
    }


def _link(link: ir.Link) -> doc.LinkDoc:
    common: dict = {}
    members: list[str | doc.MemberDoc] = []
    if link.kind == "link":
        if len({p.egress for p in link.ports}) == 1:
            common = _shaping_fields(link.ports[0].egress)
            per_member = False
        else:
            per_member = True
    else:
        base = _lan_base(link.ports[0]) if link.ports else None
        per_member = base is None or any(
            lan_halves(base) != (p.egress, p.ingress) for p in link.ports
        )
        if not per_member and base is not None:
            common = _shaping_fields(base)
    for port in link.ports:
        fields: dict = {"node": port.node, "ip": port.ip}
        if port.cost != 1:
            fields["cost"] = port.cost
        if per_member:
            fields["egress"] = doc.ShapingDoc(**_shaping_fields(port.egress))
            if link.kind == "lan":
                fields["ingress"] = doc.ShapingDoc(**_shaping_fields(port.ingress))
        members.append(doc.MemberDoc(**fields))
    netmask = link.ports[0].netmask if link.ports else None
    return doc.LinkDoc(
        name=link.name,
        members=members,
        netmask=netmask if netmask != "255.255.255.0" else None,
        noshaping=link.noshaping or None,
        simulated=link.simulated or None,
        **common,
    )


def _lan_base(port: ir.Port) -> ir.Shaping | None:
    """The member-to-member shaping whose halves are this port's, if there is one."""
    e = port.egress
    loss = 1 - (1 - e.loss) ** 2 if e.loss else 0.0
    base = e.model_copy(update={"delay_s": e.delay_s * 2, "loss": loss})
    if lan_halves(base) == (port.egress, port.ingress):
        return base
    # Floating point may not invert exactly; try the nearest neighbours of the guess.
    for delay in (math.nextafter(base.delay_s, 0), math.nextafter(base.delay_s, 1)):
        candidate = base.model_copy(update={"delay_s": delay})
        if lan_halves(candidate) == (port.egress, port.ingress):
            return candidate
    return None


def _application(a: ir.Application) -> doc.ApplicationDoc:
    return doc.ApplicationDoc(
        name=a.name,
        type=a.kind,
        agent=a.agent,
        packet_size=a.packet_size_bytes if a.packet_size_bytes != 210 else None,
        rate=format_bandwidth(a.rate_bps) if a.rate_bps != 100_000_000 else None,
        interval=format_delay(a.interval_s) if a.interval_s else None,
        max_packets=a.max_packets,
        random=a.random or None,
    )


def _event(e: ir.Event) -> doc.EventDoc:
    return doc.EventDoc(
        at=format_time(e.time_s),
        object=e.object,
        verb=e.verb,
        args=list(e.args) or None,
    )


# -- ns-2 ----------------------------------------------------------------------------------


def to_ns(exp: ir.Experiment) -> str:
    """An Emulab-style ns-2 file that resolves to ``exp`` (runs in ns-2 with tb_compat.tcl)."""
    w = _NsWriter(exp)
    return w.write()


def _var(name: str) -> str:
    return f"${{{name}}}" if "-" in name else f"${name}"


def _setvar(name: str) -> str:
    return f"{{{name}}}" if "-" in name else name


def _tcl(text: str) -> str:
    """A Tcl word for ``text`` that evaluates to exactly ``text``."""
    if text and all(c.isalnum() or c in "._-/:+=@,%" for c in text):
        return text
    escaped = "".join("\\" + c if c in '\\"$[]{}' else c for c in text).replace("\n", "\\n")
    return f'"{escaped}"'


def _simulated(line: str, simulated: bool) -> str:
    """``line`` inside a make-simulated block when what it makes is simulated (only the
    command that makes a node, link or LAN needs to be inside)."""
    return f"$ns make-simulated {{ {line} }}" if simulated else line


class _NsWriter:
    def __init__(self, exp: ir.Experiment):
        self.exp = exp
        self.lines: list[str] = []

    def out(self, line: str = "") -> None:
        self.lines.append(line)

    def write(self) -> str:
        e = self.exp
        self.out(f"# {e.name}: written by `nestbed convert`; runs in ns-2 with tb_compat.tcl")
        self.out("set ns [new Simulator]")
        self.out("source tb_compat.tcl")
        self.out()
        for name, value in e.parameters.items():
            self.out(f"$ns define-template-parameter {name} {_tcl(value)}")
        for name, value in e.env.items():
            if name not in e.parameters:
                self.out(f"set opt({name}) {_tcl(value)}")
        for n in e.nodes:
            self.node(n)
        self.out()
        for link in e.links:
            self.link(link)
        for lan in e.lans:
            self.link(lan)
        self.out()
        mode = {"static": "Static", "session": "Session", "manual": "Manual"}.get(e.routing)
        if mode:
            self.out(f"$ns rtproto {mode}")
        if e.simulation_hard_limit_s is not None:  # ns-2's own knob: it keeps its meaning there
            self.out(f"Scheduler/RealTime set maxslop_ {e.simulation_hard_limit_s!r}")
        for n in e.nodes:
            for r in _unique_routes(n.routes):
                if not (r.destination_object and r.via_node):
                    raise UserError(
                        f"node {n.name} has a route to {r.destination} via {r.via} given as "
                        "addresses, which ns syntax cannot express; convert to yaml instead"
                    )
                self.out(
                    f"{_var(n.name)} add-route {_var(r.destination_object)} {_var(r.via_node)}"
                )
        self.traffic()
        for x in e.inert:
            self.out(" ".join([x.command, *(_tcl(a) for a in x.args)]))
        self.events()
        self.out()
        self.out("$ns run")
        return "\n".join(self.lines) + "\n"

    def node(self, n: ir.Node) -> None:
        v = _var(n.name)
        self.out(_simulated(f"set {_setvar(n.name)} [$ns node]", n.simulated))
        for command, value in (
            ("tb-set-hardware", n.hardware_type),
            ("tb-set-node-os", n.os),
            ("tb-set-node-startcmd", n.startcmd),
            ("tb-fix-node", n.fixed_host),
        ):
            if value is not None:
                self.out(f"{command} {v} {_tcl(value)}")
        if n.cpu_cores is not None:
            self.out(f"nb-set-node-cpu {v} {n.cpu_cores!r}")
        if n.cpu_pin:
            self.out(f"nb-set-node-cpu-pin {v} {{{' '.join(str(c) for c in n.cpu_pin)}}}")
        if n.memory_bytes is not None:
            self.out(f"nb-set-node-memory {v} {n.memory_bytes}")
        for key, value in n.sysctls.items():
            self.out(f"nb-set-node-sysctl {v} {_tcl(key)} {_tcl(value)}")

    def link(self, link: ir.Link) -> None:
        d = _link(link)
        name, v = link.name, _var(link.name)
        nodes = [p.node for p in link.ports]
        kinds = {p.egress.queue.kind for p in link.ports} | {
            p.ingress.queue.kind for p in link.ports
        }
        if link.kind == "link":
            kinds = {p.egress.queue.kind for p in link.ports}
        if len(kinds) > 1:
            raise UserError(
                f"{link.kind} {name} has different queue types per direction, which ns syntax "
                "cannot express; convert to yaml"
            )
        if link.kind == "lan" and any(
            q != ir.Queue() for p in link.ports for q in (p.egress.queue, p.ingress.queue)
        ):
            raise UserError(
                f"LAN {name} has queue settings, which ns syntax cannot express; convert to yaml"
            )
        queue = kinds.pop()
        qname = {"droptail": "DropTail", "red": "RED", "gred": "GRED"}[queue]
        bw, delay = d.bandwidth or "0", d.delay or "0ms"
        if link.kind == "link":
            made = (
                f"set {_setvar(name)} [$ns duplex-link {_var(nodes[0])} {_var(nodes[1])} {bw} "
                f"{delay} {qname}]"
            )
        else:
            members = " ".join(_var(n) for n in nodes)
            made = f'set {_setvar(name)} [$ns make-lan "{members}" {bw} {delay}]'
        self.out(_simulated(made, link.simulated))
        if link.noshaping:
            self.out(f"tb-set-noshaping {v} 1")
        if d.loss:
            self.out(f"tb-set-{link.kind}-loss {v} {d.loss!r}")
        self.extras(v, d, f"{link.kind} {name}")
        if d.queue:
            for src in nodes if link.kind == "link" else []:
                other = next(n for n in nodes if n != src)
                self.queue(f"[[$ns link {_var(src)} {_var(other)}] queue]", d.queue, queue)
        if d.netmask:
            self.out(f"tb-set-netmask {v} {d.netmask}")
        for j, m in enumerate(d.members):
            assert isinstance(m, doc.MemberDoc)
            node = _var(m.node)
            self.out(f"tb-set-ip-{link.kind} {node} {v} {m.ip}")
            if m.cost:
                peer = nodes[1 - j] if link.kind == "link" else None
                if peer is None:
                    raise UserError(
                        f"LAN {name} has a cost on member {m.node}, which ns syntax cannot "
                        "express; convert to yaml"
                    )
                self.out(f"$ns cost {node} {_var(peer)} {m.cost}")
            if m.egress is not None:
                self.member(link, j, m)

    def member(self, link: ir.Link, j: int, m: doc.MemberDoc) -> None:
        v, node = _var(link.name), _var(m.node)
        e, i = m.egress or doc.ShapingDoc(), m.ingress or doc.ShapingDoc()
        if link.kind == "link":
            self.out(
                f"tb-set-link-simplex-params {v} {node} {e.delay or '0ms'} {e.bandwidth or '0'} "
                f"{e.loss or 0}"
            )
            other = _var(link.ports[1 - j].node)
            if e.queue:
                self.queue(
                    f"[[$ns link {node} {other}] queue]",
                    e.queue,
                    e.queue.type or "droptail",
                )
            if e.drop_packets:
                self.out(
                    f"nb-set-link-drop-packets {v} {node} {{{' '.join(map(str, e.drop_packets))}}}"
                )
            rest = e.model_copy(
                update={
                    "delay": None,
                    "bandwidth": None,
                    "loss": None,
                    "queue": None,
                    "drop_packets": None,
                }
            )
        else:
            self.out(
                f"tb-set-lan-simplex-params {v} {node} {e.delay or '0ms'} {e.bandwidth or '0'} "
                f"{e.loss or 0} "
                f"{i.delay or '0ms'} {i.bandwidth or '0'} {i.loss or 0}"
            )
            rest = e.model_copy(update={"delay": None, "bandwidth": None, "loss": None})
            rest_in = i.model_copy(update={"delay": None, "bandwidth": None, "loss": None})
            if rest_in != doc.ShapingDoc():
                raise UserError(
                    f"LAN {link.name}: member {m.node} has switch-to-node shaping beyond delay, "
                    "bandwidth and loss, which ns syntax cannot express; convert to yaml"
                )
        if rest != doc.ShapingDoc():
            raise UserError(
                f"{link.kind} {link.name}: member {m.node} has per-direction shaping beyond delay, "
                "bandwidth, loss, queue and dropped packets, which ns syntax cannot express; "
                "convert to yaml"
            )

    def extras(self, v: str, d: doc.LinkDoc, what: str) -> None:
        if d.drop_packets:
            for m in d.members:
                node = m.node if isinstance(m, doc.MemberDoc) else m
                ordinals = " ".join(map(str, d.drop_packets))
                self.out(f"nb-set-link-drop-packets {v} {_var(node)} {{{ordinals}}}")
        if d.jitter:
            dist = f" {d.jitter_distribution}" if d.jitter_distribution else ""
            self.out(f"nb-set-link-jitter {v} {d.jitter}{dist}")
        if d.reorder:
            self.out(f"nb-set-link-reorder {v} 1")
        if d.gilbert_elliott:
            g = d.gilbert_elliott
            self.out(
                f"nb-set-link-gilbert-elliott {v} {g.p!r} {g.r!r} {g.loss_bad!r} {g.loss_good!r}"
            )
        if d.duplicate:
            self.out(f"nb-set-link-duplicate {v} {d.duplicate!r}")
        if d.corrupt:
            self.out(f"nb-set-link-corrupt {v} {d.corrupt!r}")

    def queue(self, q_expr: str, q: doc.QueueDoc, kind: str) -> None:
        settings = {
            "limit_": q.limit,
            "queue-in-bytes_": 1 if q.limit_unit == "bytes" else None,
            "thresh_": q.thresh,
            "maxthresh_": q.maxthresh,
            "q_weight_": q.q_weight,
            "linterm_": q.linterm,
            "mean_pktsize_": q.mean_packet_size,
            "gentle_": 1 if kind == "gred" else None,
        }
        for var, value in settings.items():
            if value is not None:
                self.out(
                    f"{q_expr} set {var} {value!r}"
                    if isinstance(value, float)
                    else f"{q_expr} set {var} {value}"
                )

    def traffic(self) -> None:
        e = self.exp
        classes = {"udp": "Agent/UDP", "null": "Agent/Null", "tcpsink": "Agent/TCPSink"}
        variants = {
            "reno": "Reno",
            "newreno": "Newreno",
            "sack": "Sack1",
            "vegas": "Vegas",
            "fulltcp": "FullTcp",
            "delack": "DelAck",
        }
        for a in e.agents:
            cls = classes.get(a.kind, "Agent/TCP")
            if a.variant:
                cls += "/" + variants.get(a.variant, a.variant.capitalize())
            self.out(f"set {_setvar(a.name)} [new {cls}]")
            self.out(f"$ns attach-agent {_var(a.node)} {_var(a.name)}")
            for k, value in a.params.items():
                self.out(f"{_var(a.name)} set {k} {_tcl(value)}")
        done = set()
        for a in e.agents:
            if a.peer and a.peer not in done:
                self.out(f"$ns connect {_var(a.name)} {_var(a.peer)}")
                done.update({a.name, a.peer})
        for app in e.applications:
            cls = "Application/Traffic/CBR" if app.kind == "cbr" else "Application/FTP"
            self.out(f"set {_setvar(app.name)} [new {cls}]")
            self.out(f"{_var(app.name)} attach-agent {_var(app.agent)}")
            d = _application(app)
            for var, value in (
                ("packetSize_", d.packet_size),
                ("rate_", d.rate),
                ("interval_", d.interval),
                ("maxpkts_", d.max_packets),
                ("random_", 1 if d.random else None),
            ):
                if value is not None:
                    self.out(f"{_var(app.name)} set {var} {value}")
        for p in e.programs:
            self.out(f"set {_setvar(p.name)} [new Program $ns]")
            self.out(f"{_var(p.name)} set node {_var(p.node)}")
            self.out(f"{_var(p.name)} set command {_tcl(p.command)}")
            if p.dir:
                self.out(f"{_var(p.name)} set dir {_tcl(p.dir)}")
            if p.timeout_s:
                self.out(f"{_var(p.name)} set timeout {p.timeout_s!r}")
            if p.expected_exit_code:
                self.out(f"{_var(p.name)} set expected-exit-code {p.expected_exit_code}")

    def events(self) -> None:
        e = self.exp
        for g in e.groups:
            members = " ".join(_var(m) for m in g.members)
            self.out(f"set {_setvar(g.name)} [$ns event-group [list {members}]]")
        for t in e.timelines:
            self.out(f"set {_setvar(t.name)} [$ns event-timeline]")
            for ev in t.events:
                self.out(f"{_var(t.name)} at {format_time(ev.time_s)} {self.action(ev)}")
        for s in e.sequences:
            steps = "; ".join(self.action(a, quote=False) for a in s.steps)
            self.out(f"set {_setvar(s.name)} [$ns event-sequence {{{steps}}}]")
        for ev in e.events:
            self.out(f"$ns at {format_time(ev.time_s)} {self.action(ev)}")

    def action(self, a: ir.Action, quote: bool = True) -> str:
        """The event as Tcl: `[list $obj verb arg ...]`, so arguments stay literal."""
        obj = "$ns" if a.object == "ns" else _var(a.object)
        if a.verb == "queue-set":
            link = next(x for x in self.exp.all_links if x.name == a.object)
            src, var, value = a.args
            other = next(p.node for p in link.ports if p.node != src)
            words = [f"[[$ns link {_var(src)} {_var(other)}] queue]", "set", var, _tcl(value)]
        else:
            words = [obj, a.verb, *(_tcl(x) for x in a.args)]
        if quote:
            return "[list " + " ".join(words) + "]"
        if any(_tcl(x) != x for x in a.args):
            raise UserError(
                f"sequence step {a.object} {a.verb} has arguments with spaces or Tcl "
                "characters, which ns syntax for sequences cannot express; convert to yaml"
            )
        return " ".join(words)
