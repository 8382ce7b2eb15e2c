"""Resolving an experiment document into the IR: units, names, addresses, references, events.

This is the one place where an experiment's meaning is decided, whatever file it came from.
Every problem is gathered (with its file:line when the front end knows it) before failing.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import ValidationError

from nestbed.model import ir
from nestbed.model.base import NAME_RE, OBJECT_NAME_RE
from nestbed.model.events import check_action
from nestbed.model.ir import lan_halves
from nestbed.model.simulated import command_on_simulated, gaps, node_gaps
from nestbed.spec import document as doc
from nestbed.spec.problems import Location, Problems, describe_validation_error
from nestbed.units import (
    UnitError,
    parse_bandwidth,
    parse_delay,
    parse_probability,
    parse_size,
    parse_time,
)

Path_ = tuple[str | int, ...]

DEFAULT_NETMASK = "255.255.255.0"

# Emulab commands kept from ns files that do nothing here, and why.
INERT_REASONS = {
    "tb-set-node-tarfiles": "nodes share the host's file system, so nothing is installed",
    "tb-set-tarfiles": "nodes share the host's file system, so nothing is installed",
    "tb-set-node-rpms": "nodes share the host's file system, so nothing is installed",
    "tb-set-node-cmdline": "nodes share the host's kernel",
    "tb-set-node-failure-action": "a node that fails always fails the swap-in",
    "tb-set-link-failure-action": "a link that fails always fails the swap-in",
    "tb-set-endnodeshaping": "every shaped link is shaped by nestbed-linkd",
    "tb-use-endnodeshaping": "every shaped link is shaped by nestbed-linkd",
    "tb-force-endnodeshaping": "every shaped link is shaped by nestbed-linkd",
    "tb-set-sync-server": "nestbed's controller runs events itself",
    "tb-make-soft-vtype": "there are no hardware types to choose from on one host",
    "tb-make-hard-vtype": "there are no hardware types to choose from on one host",
    "tb-make-weighted-vtype": "there are no hardware types to choose from on one host",
    "tb-set-colocate-factor": "all nodes share one host",
    "tb-set-cpu-usage": "use nb-set-node-cpu to limit a node's CPU",
    "tb-set-mem-usage": "use nb-set-node-memory to limit a node's memory",
    "tb-set-link-est-bandwidth": "the mapper places links by their shaped bandwidth",
    "tb-set-lan-est-bandwidth": "the mapper places links by their shaped bandwidth",
    "tb-set-multiplexed": "links are virtual interfaces already",
    "tb-set-useveth": "links are veth pairs already",
    "tb-set-link-encap": "links are veth pairs without encapsulation",
    "tb-set-allowcolocate": "all nodes share one host",
    "tb-set-security-level": "nodes are network namespaces on one host",
    "tb-use-ipassign": "addresses are always assigned as described in the documentation",
    "tb-add-node-attribute": "nodes have no testbed attributes on one host",
    "tb-elab-in-elab": "nestbed does not build a testbed inside an experiment",
    "tb-set-elabinelab-cvstag": "nestbed does not build a testbed inside an experiment",
    "tb-elabinelab-singlenet": "nestbed does not build a testbed inside an experiment",
    "tb-set-elabinelab-attribute": "nestbed does not build a testbed inside an experiment",
    "tb-unset-elabinelab-attribute": "nestbed does not build a testbed inside an experiment",
    "tb-set-node-inner-elab-role": "nestbed does not build a testbed inside an experiment",
    "tb-set-link-backfill": "links carry only the experiment's traffic",
    "tb-set-lan-backfill": "links carry only the experiment's traffic",
    "tb-set-link-simplex-backfill": "links carry only the experiment's traffic",
    "tb-set-node-lan-est-bandwidth": "the mapper places links by their shaped bandwidth",
    "tb-set-node-lan-backfill": "links carry only the experiment's traffic",
    "tb-set-uselatestwadata": "there are no wide-area nodes",
    "tb-set-usewatunnels": "there are no wide-area nodes",
    "tb-set-wasolver-weights": "there are no wide-area nodes",
    "tb-set-node-plab-role": "there are no PlanetLab nodes",
    "tb-set-node-plab-plcnet": "there are no PlanetLab nodes",
    "tb-set-node-usesharednode": "every node shares the one host",
    "tb-set-node-sharingmode": "every node shares the one host",
    "tb-set-node-service": "nodes run no Emulab client services; use tb-set-node-startcmd",
    "tb-add-node-service-hook": "nodes run no Emulab client services; use tb-set-node-startcmd",
    "tb-bind-parent": "all nodes share one host",
    "tb-fix-current-resources": "all nodes share one host",
    "tb-set-encapsulate": "links are veth pairs without encapsulation",
    "tb-set-vlink-emulation": "links are veth pairs without encapsulation",
    "tb-set-jail-os": "nodes are network namespaces sharing the host's file system",
    "tb-set-delay-os": "links are shaped by nestbed-linkd, not delay nodes",
    "tb-set-delay-capacity": "links are shaped by nestbed-linkd, not delay nodes",
    "tb-set-ipassign-args": "addresses are always assigned as described in the documentation",
    "tb-set-dpdb": "nestbed keeps its own store",
    "tb-use-physnaming": "there are no physical node names to take",
    "tb-set-node-id": "there are no physical node names to take",
    "tb-set-modelnet-cores": "there is no ModelNet",
    "tb-set-modelnet-edges": "there is no ModelNet",
    "tb-set-node-deltas": "nodes share the host's file system, so nothing is installed",
    "tb-set-lan-protocol": "links and LANs are Ethernet",
    "tb-set-link-protocol": "links and LANs are Ethernet",
    "tb-set-lan-accesspoint": "there are no wireless LANs",
    "tb-set-lan-setting": "there are no wireless LANs",
    "tb-set-node-lan-setting": "there are no wireless LANs",
    "tb-feedback-vnode": "there is no resource feedback",
    "tb-feedback-vlan": "there is no resource feedback",
}

# Only network sysctls are per namespace; anything else would change the host itself.
_NET_SYSCTL = re.compile(r"^net(\.[A-Za-z0-9_-]+)+$")
_COMPATIBLE_AGENTS = {
    frozenset({"udp", "null"}),
    frozenset({"udp"}),
    frozenset({"tcp", "tcpsink"}),
    frozenset({"tcp"}),  # FullTcp peers
}


def resolve(
    document: doc.ExperimentDoc,
    *,
    file: str,
    source: ir.Source | None = None,
    locations: Mapping[str, Location] | None = None,
    warnings: list[ir.Warning] | None = None,
    default_name: str | None = None,
    link_order: list[str] | None = None,
) -> ir.Experiment:
    """Turns a document into the IR, or raises ``SpecError`` with every problem found.

    ``link_order`` lists "links.N" and "lans.N" in the order they were created, which is the
    order subnets are assigned in; without it, the order of their lines in the file.
    """
    resolver = _Resolver(document, Problems(file, locations), link_order)
    experiment = resolver.run(default_name or Path(file).stem, source, warnings or [])
    return experiment


class _Resolver:
    def __init__(
        self, document: doc.ExperimentDoc, problems: Problems, link_order: list[str] | None
    ):
        self.doc = document
        self.p = problems
        self.link_order = link_order
        self.kinds: dict[str, str] = {"ns": "ns"}  # object name -> kind

    # -- helpers -------------------------------------------------------------------------

    def unit(self, path: Path_, parse: Callable, value):  # type: ignore[no-untyped-def]
        try:
            return parse(value)
        except UnitError as exc:
            self.p.error(path, f"{self.label(path)}: {exc}")
            return None

    def label(self, path: Path_) -> str:
        """`link bottleneck`, `event 3`, ... for the object a document path points into."""
        section, index = path[0], path[1] if len(path) > 1 else None
        items = getattr(self.doc, str(section), None)
        if not isinstance(items, list) or not isinstance(index, int) or index >= len(items):
            return str(section)
        item = items[index]
        kind = {
            "links": "link",
            "lans": "LAN",
            "nodes": "node",
            "agents": "agent",
            "applications": "application",
            "programs": "program",
            "events": "event at",
            "timelines": "timeline",
            "sequences": "sequence",
            "groups": "group",
        }[str(section)]
        name = getattr(item, "name", None) or getattr(item, "at", None)
        if name is None and section in ("links", "lans"):
            name = self.link_names[0 if section == "links" else 1][index]
        return f"{kind} {name}"

    def claim(self, path: Path_, name: str, kind: str) -> None:
        # Node, link and LAN names become host and interface names; other names may hold '_'.
        if kind in ("node", "link", "LAN", "lan") and not NAME_RE.match(name):
            self.p.error(
                path,
                f"{kind} name '{name}' is not valid: names may contain only letters, digits "
                "and '-'; rename it",
            )
        elif not OBJECT_NAME_RE.match(name):
            self.p.error(
                path,
                f"{kind} name '{name}' is not valid: names may contain only letters, digits, "
                "'-' and '_'; rename it",
            )
        if name in self.kinds:
            self.p.error(
                path,
                f"the name '{name}' is used twice (a {self.kinds[name]} and a {kind}); "
                "give each object its own name",
            )
        else:
            self.kinds[name] = kind

    def need(self, path: Path_, name: str | None, kinds: set[str], what: str) -> bool:
        if name is None:
            return False
        if self.kinds.get(name) in kinds:
            return True
        if name in self.kinds:
            self.p.error(
                path,
                f"{what} '{name}' is a {self.kinds[name]}, not a {'/'.join(sorted(kinds))}",
            )
        else:
            self.p.error(path, f"{what} '{name}' does not exist; declare it or fix the name")
        return False

    # -- the whole experiment ------------------------------------------------------------

    def run(
        self, default_name: str, source: ir.Source | None, warnings: list[ir.Warning]
    ) -> ir.Experiment:
        d = self.doc
        name = d.name or default_name
        if not d.name and not NAME_RE.match(name):
            # As Emulab's web form asks: only letters, digits and '-'; the file's name is a
            # suggestion, so a valid one is derived from it rather than refused.
            name = derive_name(default_name)
            self.p.warn(
                ("name",),
                f"the experiment is named '{name}' after the file name '{default_name}', which "
                "is not a valid name (only letters, digits and '-'); pass --name to choose another",
            )
        if not NAME_RE.match(name):
            self.p.error(
                ("name",),
                f"experiment name '{name}' is not valid: names may contain only letters, digits "
                "and '-'; rename the file or pass --name",
            )
        nodes = [self.node_names(i, n) for i, n in enumerate(d.nodes)]
        link_names = self.link_names
        links = [
            self.link(("links", i), ld, link_names[0][i], "link") for i, ld in enumerate(d.links)
        ]
        lans = [self.link(("lans", i), ld, link_names[1][i], "lan") for i, ld in enumerate(d.lans)]
        for i, a in enumerate(d.agents):
            self.claim(("agents", i), a.name, "agent")
        for i, a in enumerate(d.applications):
            self.claim(("applications", i), a.name, a.type)
        for i, prog in enumerate(d.programs):
            self.claim(("programs", i), prog.name, "program")
        for i, t in enumerate(d.timelines):
            self.claim(("timelines", i), t.name, "timeline")
        for i, s in enumerate(d.sequences):
            self.claim(("sequences", i), s.name, "sequence")
        for i, g in enumerate(d.groups):
            self.claim(("groups", i), g.name, "group")
        groups = [self.group(i, g) for i, g in enumerate(d.groups)]

        links, lans = self.assign_addresses(links, lans)
        routing = d.routing or "none"
        nodes = [self.node(i, n, links + lans, routing) for i, n in enumerate(nodes)]
        experiment_fields = dict(
            name=name,
            source=source,
            routing=routing,
            simulation_hard_limit_s=self.hard_limit(d.simulation, nodes),
            nodes=nodes,
            links=links,
            lans=lans,
            agents=[self.agent(i, a) for i, a in enumerate(d.agents)],
            applications=[self.application(i, a) for i, a in enumerate(d.applications)],
            programs=[self.program(i, prog) for i, prog in enumerate(d.programs)],
            events=self.events(("events",), d.events),
            timelines=[
                ir.Timeline.model_construct(
                    name=t.name,
                    events=self.events(("timelines", i, "events"), t.events),
                )
                for i, t in enumerate(d.timelines)
            ],
            sequences=[
                ir.Sequence.model_construct(
                    name=s.name,
                    steps=[
                        self.action(("sequences", i, "steps", j), st)
                        for j, st in enumerate(s.steps)
                    ],
                )
                for i, s in enumerate(d.sequences)
            ],
            groups=groups,
            env={k: _text(v) for k, v in (d.env or {}).items()},
            parameters={k: _text(v) for k, v in (d.parameters or {}).items()},
            inert=[self.inert(i, x) for i, x in enumerate(d.inert)],
        )
        self.p.raise_if_any()
        all_warnings = list(warnings) + [
            ir.Warning(
                message=w.message,
                where=ir.Where(file=w.file or self.p.file, line=w.line),
            )
            for w in self.p.warnings
        ]
        # Everything was checked above with located messages; the IR validates once more at its
        # boundary, and a failure there is reported at the closest place known.
        try:
            return ir.Experiment.model_validate(
                ir.Experiment.model_construct(
                    **experiment_fields, warnings=all_warnings
                ).model_dump(warnings=False)
            )
        except ValidationError as exc:
            describe_validation_error(exc, self.p)
            self.p.raise_if_any()
            raise

    def hard_limit(
        self, simulation: doc.SimulationDoc | None, nodes: list[ir.Node]
    ) -> float | None:
        """The simulated part's hard limit in seconds (None: the default)."""
        if simulation is None or simulation.hard_limit is None:
            return None
        path = ("simulation", "hard_limit")
        try:
            limit = parse_delay(simulation.hard_limit)
        except UnitError:
            limit = 0.0
        if limit <= 0:
            self.p.error(path, f"the simulation's hard limit {str(simulation.hard_limit)!r} is "
                               "not a positive delay; write one in s, ms, us or ns (for "
                               "example 5ms)")  # fmt: skip
            return None
        if not any(n.simulated for n in nodes):
            self.p.warn(path, "the simulation's hard limit has no effect: the experiment has "
                              "no simulated nodes (make-simulated in Tcl, simulated: true in "
                              "YAML)")  # fmt: skip
        return limit

    # -- nodes ---------------------------------------------------------------------------

    def node_names(self, i: int, n: doc.NodeDoc) -> doc.NodeDoc:
        self.claim(("nodes", i), n.name, "node")
        return n

    def node(self, i: int, n: doc.NodeDoc, links: list[ir.Link], routing: str) -> ir.Node:
        path: Path_ = ("nodes", i)
        memory = (
            self.unit(path + ("memory",), lambda v: parse_size(v, "memory"), n.memory)
            if n.memory is not None
            else None
        )
        if n.cpu is not None and not n.cpu > 0:
            self.p.error(
                path + ("cpu",),
                f"node {n.name}: CPU limit {n.cpu} is not a positive number of cores; use for "
                "example 0.5",
            )
        for key in n.sysctls or {}:
            if not _NET_SYSCTL.match(key):
                self.p.error(
                    path + ("sysctls",),
                    f"node {n.name}: sysctl '{key}' is not a per-node network setting; only "
                    "net.* keys (for example net.ipv4.tcp_congestion_control) apply to one node",
                )
        routes: list[ir.Route] = []
        for j, r in enumerate(n.routes or []):
            routes += self.route(path + ("routes", j), n.name, r, links)
        if routes and routing != "manual":
            self.p.warn(
                path + ("routes",),
                f"node {n.name} has manual routes but routing is {routing}; they are kept but "
                "only installed with `$ns rtproto Manual` (routing: manual)",
            )
        node = ir.Node.model_construct(
            name=n.name,
            hardware_type=n.hardware,
            os=n.os,
            startcmd=n.startcmd,
            cpu_cores=n.cpu if n.cpu and n.cpu > 0 else None,
            cpu_pin=tuple(n.cpu_pin or ()),
            memory_bytes=memory or None,
            fixed_host=n.fix,
            simulated=bool(n.simulated),
            sysctls={k: _text(v) for k, v in (n.sysctls or {}).items()},
            routes=routes,
        )
        if node.simulated:
            for gap in node_gaps(node):
                self.p.error(path + (gap.option,), gap.sentence)
        return node

    def route(
        self, path: Path_, node: str, r: doc.RouteDoc, links: list[ir.Link]
    ) -> list[ir.Route]:
        mine = [p for link in links for p in link.ports if p.node == node and _valid_port(p)]
        # Next hop: a node sharing a link with this one, or an address on one of its subnets.
        via_ip, via_node = None, None
        if r.via in self.kinds:
            if self.need(path + ("via",), r.via, {"node"}, "next hop"):
                for link in links:
                    if any(p.node == node for p in link.ports) and any(
                        p.node == r.via for p in link.ports
                    ):
                        via_ip, via_node = link.port(r.via).ip, r.via
                        break
                else:
                    self.p.error(
                        path + ("via",),
                        f"route on node {node}: next hop {r.via} shares no link or LAN with "
                        f"{node}; use a directly connected node",
                    )
        else:
            try:
                address = ipaddress.IPv4Address(r.via)
            except ValueError:
                self.p.error(
                    path + ("via",),
                    f"route on node {node}: next hop '{r.via}' is neither a node nor an IPv4 "
                    "address",
                )
                return []
            if not any(address in p.interface.network for p in mine):
                self.p.error(
                    path + ("via",),
                    f"route on node {node}: next hop {address} is on none of {node}'s subnets; use "
                    "a directly connected address",
                )
            via_ip = str(address)
        if via_ip is None:
            return []
        kind = self.kinds.get(r.dst)
        if kind == "node":
            dsts = [p.ip + "/32" for link in links for p in link.ports if p.node == r.dst]
        elif kind in ("link", "lan"):
            dsts = [next(link.subnet for link in links if link.name == r.dst)]
        else:
            try:
                dsts = [str(ipaddress.IPv4Network(r.dst))]
            except ValueError:
                self.p.error(
                    path + ("dst",),
                    f"route on node {node}: destination '{r.dst}' is neither a node, link, LAN nor "
                    "an IPv4 prefix",
                )
                return []
            kind = None
        obj = r.dst if kind else None
        return [
            ir.Route.model_construct(
                destination=d, via=via_ip, destination_object=obj, via_node=via_node
            )
            for d in dsts
        ]

    # -- links and LANs ------------------------------------------------------------------

    @functools.cached_property
    def link_names(self) -> tuple[list[str], list[str]]:
        d = self.doc
        named = d.nodes + d.agents + d.applications + d.programs + d.timelines + d.sequences
        used = {ld.name for ld in d.links + d.lans if ld.name} | {x.name for x in named + d.groups}
        names: tuple[list[str], list[str]] = ([], [])
        for kind, docs, out in (
            ("link", self.doc.links, names[0]),
            ("lan", self.doc.lans, names[1]),
        ):
            counter = 0
            for ld in docs:
                if ld.name:
                    out.append(ld.name)
                    continue
                while f"{kind}{counter}" in used:
                    counter += 1
                out.append(f"{kind}{counter}")
                used.add(f"{kind}{counter}")
        return names

    def link(self, path: Path_, ld: doc.LinkDoc, name: str, kind: str) -> ir.Link:
        self.claim(path, name, kind)
        what = f"{kind} {name}"
        members = [m if isinstance(m, doc.MemberDoc) else doc.MemberDoc(node=m) for m in ld.members]
        nodes = [m.node for m in members]
        if kind == "link" and len(members) != 2:
            self.p.error(
                path + ("members",),
                f"{what} has {len(members)} members; a link joins exactly two nodes (use a LAN for "
                "more)",
            )
        if kind == "lan" and len(members) < 1:
            self.p.error(path + ("members",), f"{what} has no members; list its nodes")
        for j, m in enumerate(members):
            self.need(path + ("members", j), m.node, {"node"}, f"{what}: member")
            if nodes.count(m.node) > 1 and nodes.index(m.node) == j:
                self.p.error(
                    path + ("members", j),
                    f"{what} lists node {m.node} twice; a node joins a {kind} once",
                )
        if ld.drop_packets and kind == "lan":
            self.p.error(
                path + ("drop_packets",),
                f"{what}: packets to drop are counted per direction; set drop_packets on a "
                "member's egress",
            )
        base = self.shaping(path, ld, ir.Shaping(), what)
        if kind == "lan":
            egress_base, ingress_base = lan_halves(base)
        else:
            egress_base, ingress_base = base, ir.Shaping()
        ports = []
        for j, m in enumerate(members):
            mpath = path + ("members", j)
            if kind == "link" and m.ingress is not None:
                self.p.error(
                    mpath + ("ingress",),
                    f"{what}: member {m.node} has ingress shaping, but a link is shaped per "
                    "direction on the sending side; set egress on the other member",
                )
            egress = (
                self.shaping(mpath + ("egress",), m.egress, egress_base, what)
                if m.egress
                else egress_base
            )
            ingress = (
                self.shaping(mpath + ("ingress",), m.ingress, ingress_base, what)
                if m.ingress
                else ingress_base
            )
            if m.cost is not None and m.cost < 1:
                self.p.error(
                    mpath + ("cost",),
                    f"{what}: cost {m.cost} of member {m.node} must be a whole number of at least "
                    "1",
                )
            ports.append(
                ir.Port.model_construct(
                    node=m.node,
                    ip=m.ip or "0.0.0.0",
                    netmask=ld.netmask or DEFAULT_NETMASK,
                    cost=max(m.cost or 1, 1),
                    egress=egress,
                    ingress=ingress,
                )
            )
        if ld.netmask:
            try:
                ipaddress.IPv4Network(f"0.0.0.0/{ld.netmask}")
            except ValueError:
                self.p.error(
                    path + ("netmask",),
                    f"{what}: netmask '{ld.netmask}' is not a valid IPv4 netmask; use for example "
                    "255.255.255.0",
                )
        for j, m in enumerate(members):
            if m.ip is not None:
                try:
                    ipaddress.IPv4Address(m.ip)
                except ValueError:
                    self.p.error(
                        path + ("members", j, "ip"),
                        f"{what}: address '{m.ip}' of member {m.node} is not a valid IPv4 address",
                    )
        link = ir.Link.model_construct(
            name=name,
            kind=kind,  # type: ignore[arg-type]
            ports=ports,
            subnet="0.0.0.0/0",
            noshaping=bool(ld.noshaping),
            simulated=bool(ld.simulated),
        )
        self.refuse_simulated_gaps(path, link)
        return link

    def refuse_simulated_gaps(self, path: Path_, link: ir.Link) -> None:
        """An error, at the option's line, for each option of a link between simulated nodes
        that simulated links do not have (``model.simulated``)."""
        simulated = {n.name for n in self.doc.nodes if n.simulated}
        if not link.ports or not all(p.node in simulated for p in link.ports):
            return
        for gap in gaps(link):
            self.p.error(path + (gap.option,), gap.sentence)

    def shaping(self, path: Path_, s: doc.ShapingDoc, base: ir.Shaping, what: str) -> ir.Shaping:
        """``base`` with every field ``s`` sets replaced."""
        out: dict = {}
        if s.bandwidth is not None:
            out["bandwidth_bps"] = self.unit(
                path + ("bandwidth",), parse_ns2_bandwidth, s.bandwidth
            )
        if s.delay is not None:
            out["delay_s"] = self.unit(path + ("delay",), parse_delay, s.delay)
        if s.jitter is not None:
            out["jitter_s"] = self.unit(path + ("jitter",), parse_delay, s.jitter)
        if s.loss is not None:
            out["loss"] = self.unit(path + ("loss",), parse_probability, s.loss)
        for field in ("duplicate", "corrupt"):
            value = getattr(s, field)
            if value is not None:
                out[field] = self.unit(
                    path + (field,), lambda v, f=field: parse_probability(v, f), value
                )
        if s.jitter_distribution is not None:
            out["jitter_distribution"] = s.jitter_distribution
        if s.reorder is not None:
            out["reorder"] = s.reorder
        if s.drop_packets is not None:
            if any(n < 1 for n in s.drop_packets):
                self.p.error(
                    path + ("drop_packets",),
                    f"{what}: packets to drop are numbered from 1; remove 0 and negative numbers",
                )
            else:
                out["drop_ordinals"] = tuple(s.drop_packets)
        if s.gilbert_elliott is not None:
            out["gilbert_elliott"] = self.gilbert(
                path + ("gilbert_elliott",), s.gilbert_elliott, what
            )
        if s.queue is not None:
            out["queue"] = self.queue(path + ("queue",), s.queue, base.queue, what)
        if any(v is None for v in out.values()):
            return base
        merged = base.model_copy(update=out)
        if merged.loss > 0 and merged.gilbert_elliott is not None:
            self.p.error(
                path,
                f"{what}: both a loss probability and Gilbert-Elliott loss are set; use one loss "
                "model",
            )
        return ir.Shaping.model_validate(merged.model_dump())

    def gilbert(self, path: Path_, g: doc.GilbertDoc, what: str) -> ir.GilbertElliott | None:
        simple = g.loss_rate is not None or g.burst_length is not None
        full = g.p is not None or g.r is not None
        if simple == full:
            self.p.error(
                path,
                f"{what}: give Gilbert-Elliott loss either as loss_rate and burst_length or as p "
                "and r (with optional loss_bad and loss_good)",
            )
            return None
        try:
            if simple:
                if g.loss_rate is None or g.burst_length is None:
                    raise ValueError("both loss_rate and burst_length are needed")
                if not 0 <= g.loss_rate < 1:
                    raise ValueError(f"loss_rate {g.loss_rate} must be at least 0 and below 1")
                if g.burst_length < 1:
                    raise ValueError(f"burst_length {g.burst_length} must be at least 1 packet")
                q = 1 / g.burst_length
                return ir.GilbertElliott(
                    p=g.loss_rate * q / (1 - g.loss_rate),
                    r=q,
                    loss_bad=1.0,
                    loss_good=0.0,
                )
            if g.p is None or g.r is None:
                raise ValueError("both p and r are needed")
            return ir.GilbertElliott(
                p=g.p,
                r=g.r,
                loss_bad=1.0 if g.loss_bad is None else g.loss_bad,
                loss_good=0.0 if g.loss_good is None else g.loss_good,
            )
        except ValueError as exc:
            message = str(exc).splitlines()[-1] if "validation error" in str(exc) else str(exc)
            self.p.error(path, f"{what}: Gilbert-Elliott loss is invalid: {message}")
            return None

    def queue(self, path: Path_, q: doc.QueueDoc, base: ir.Queue, what: str) -> ir.Queue | None:
        update: dict = {}
        if q.type is not None:
            update["kind"] = q.type
        if q.limit is not None:
            update["limit"] = q.limit
        if q.limit_unit is not None:
            update["limit_unit"] = q.limit_unit
        if q.mean_packet_size is not None:
            update["mean_packet_size_bytes"] = q.mean_packet_size
        for field in ("thresh", "maxthresh", "q_weight", "linterm"):
            if getattr(q, field) is not None:
                update[field] = getattr(q, field)
        try:
            return ir.Queue.model_validate(base.model_dump() | update)
        except ValueError as exc:
            for err in getattr(exc, "errors", lambda: [])():
                field = ".".join(str(x) for x in err["loc"]) or "queue"
                self.p.error(
                    path + ((err["loc"][0],) if err["loc"] else ()),
                    f"{what}: queue {field}: {err['msg']}",
                )
            return None

    def assign_addresses(
        self, links: list[ir.Link], lans: list[ir.Link]
    ) -> tuple[list[ir.Link], list[ir.Link]]:
        """User addresses are kept; the rest get one subnet per link or LAN, hosts from .2."""
        everything = [(("links", i), link) for i, link in enumerate(links)] + [
            (("lans", i), lan) for i, lan in enumerate(lans)
        ]
        everything = self.in_creation_order(everything)
        claimed: list[ipaddress.IPv4Network] = []
        user_subnet: dict[str, ipaddress.IPv4Network] = {}
        for path, link in everything:
            given = [
                (j, p) for j, p in enumerate(link.ports) if p.ip != "0.0.0.0" and _valid_ip(p.ip)
            ]
            if not given:
                continue
            try:
                nets = {ipaddress.IPv4Interface(f"{p.ip}/{p.netmask}").network for _, p in given}
            except ValueError:
                continue
            if len(nets) > 1:
                shown = ", ".join(f"{p.node} {p.ip}" for _, p in given)
                self.p.error(
                    path,
                    f"{link.kind} {link.name}: the addresses given ({shown}) are not in one "
                    "subnet; put them in one subnet or change the netmask",
                )
            # Two links or LANs in one subnet are allowed (Emulab's own tests do it; Linux
            # routes per interface): only addresses given twice collide, checked below.
            subnet = min(nets)
            user_subnet[link.name] = subnet
            claimed.extend(nets)
        owner: dict[str, str] = {}
        resolved: dict[str, ir.Link] = {}
        next_third = 1
        for path, link in everything:
            subnet = user_subnet.get(link.name)
            if subnet is None:
                try:
                    subnet, next_third = _free_subnet(
                        link.ports[0].netmask if link.ports else DEFAULT_NETMASK,
                        next_third,
                        claimed,
                    )
                except ValueError as exc:
                    self.p.error(path + ("netmask",), f"{link.kind} {link.name}: {exc}")
                    resolved[link.name] = link
                    continue
                claimed.append(subnet)
            used = {p.ip for link in links + lans for p in link.ports} | set(owner)
            # Hosts from .2 as Emulab numbers them, unless the subnet is too small for that
            # (a /30 point-to-point link has only .1 and .2).
            first = 2 if subnet.num_addresses - 3 >= len(link.ports) else 1
            hosts = (
                str(h)
                for h in subnet.hosts()
                if int(h) - int(subnet.network_address) >= first and str(h) not in used
            )
            ports = []
            for j, port in enumerate(link.ports):
                ip = port.ip
                if ip == "0.0.0.0" or not _valid_ip(ip):
                    ip = next(hosts, None) or "0.0.0.0"
                    if ip == "0.0.0.0":
                        self.p.error(
                            path + ("netmask",),
                            f"{link.kind} {link.name}: subnet {subnet} has no free address for "
                            f"member {port.node}; use a shorter netmask",
                        )
                elif ipaddress.IPv4Address(ip) in (
                    subnet.network_address,
                    subnet.broadcast_address,
                ):
                    self.p.error(
                        path + ("members", j, "ip"),
                        f"{link.kind} {link.name}: address {ip} of member {port.node} is the "
                        f"network or broadcast address of {subnet}; use a host address",
                    )
                where = f"{port.node} on {link.kind} {link.name}"
                if ip != "0.0.0.0":
                    if ip in owner:
                        self.p.error(
                            path + ("members", j, "ip"),
                            f"address {ip} is given to both {owner[ip]} and {where}; change one of "
                            "them",
                        )
                    owner.setdefault(ip, where)
                ports.append(port.model_copy(update={"ip": ip}))
            resolved[link.name] = link.model_copy(
                update={"ports": tuple(ports), "subnet": str(subnet)}
            )
        return [resolved[link.name] for link in links], [resolved[lan.name] for lan in lans]

    def in_creation_order(self, items: list[tuple[Path_, ir.Link]]) -> list[tuple[Path_, ir.Link]]:
        if self.link_order is not None:
            rank = {key: i for i, key in enumerate(self.link_order)}
        else:
            rank = {
                f"{section}.{i}": (self.p.locations.get(f"{section}.{i}") or ("", 0))[1] or 0
                for (section, i), _ in items
            }
        # Stable: without places, links come before LANs, each in document order.
        return sorted(items, key=lambda item: rank.get(f"{item[0][0]}.{item[0][1]}", 0))

    # -- traffic, programs ---------------------------------------------------------------

    def agent(self, i: int, a: doc.AgentDoc) -> ir.Agent:
        path: Path_ = ("agents", i)
        self.need(path + ("node",), a.node, {"node"}, f"agent {a.name}: node")
        if a.peer is not None and self.need(
            path + ("peer",), a.peer, {"agent"}, f"agent {a.name}: peer"
        ):
            peer = next(x for x in self.doc.agents if x.name == a.peer)
            if frozenset({a.type, peer.type}) not in _COMPATIBLE_AGENTS:
                self.p.error(
                    path + ("peer",),
                    f"agent {a.name} ({a.type}) is connected to {peer.name} ({peer.type}); connect "
                    "UDP to a Null agent and TCP to a TCPSink",
                )
            # As in Emulab and ns-2, a sink may have several sources, and a source connected
            # again sends to its last peer only (its earlier sinks then receive nothing).
            if peer.peer not in (None, a.name) and peer.type not in ("null", "tcpsink"):
                if a.type in ("null", "tcpsink"):
                    self.p.warn(
                        path + ("peer",),
                        f"agent {a.name} is connected to {peer.name}, which was connected again "
                        f"to {peer.peer}; {peer.name} sends to {peer.peer} only, as in ns-2",
                    )
                else:
                    self.p.error(
                        path + ("peer",),
                        f"agent {a.name} is connected to {peer.name}, which is connected to "
                        f"{peer.peer}; connect each agent to one peer",
                    )
        # `$ns connect` joins both ends; a YAML file may name the peer on one side only.
        peer = a.peer or next((x.name for x in self.doc.agents if x.peer == a.name), None)
        return ir.Agent.model_construct(
            name=a.name,
            kind=a.type,
            variant=a.variant,
            node=a.node,
            peer=peer,
            params={k: _text(v) for k, v in (a.params or {}).items()},
        )

    def application(self, i: int, a: doc.ApplicationDoc) -> ir.Application:
        path: Path_ = ("applications", i)
        fields: dict = {}
        if self.need(path + ("agent",), a.agent, {"agent"}, f"{a.type} {a.name}: agent"):
            agent = next(x for x in self.doc.agents if x.name == a.agent)
            wanted = "udp" if a.type == "cbr" else "tcp"
            if a.type == "ftp" and agent.type != "tcp":
                self.p.error(
                    path + ("agent",),
                    f"ftp {a.name} is attached to {agent.name}, a {agent.type} agent; attach FTP "
                    "to a TCP agent",
                )
            if a.type == "cbr" and agent.type not in ("udp", "tcp"):
                self.p.error(
                    path + ("agent",),
                    f"cbr {a.name} is attached to {agent.name}, a {agent.type} agent; attach CBR "
                    f"to a {wanted} or tcp agent",
                )
        if a.packet_size is not None:
            fields["packet_size_bytes"] = self.unit(
                path + ("packet_size",),
                lambda v: parse_size(v, "packet size"),
                a.packet_size,
            )
        if a.rate is not None:
            fields["rate_bps"] = self.unit(path + ("rate",), parse_ns2_bandwidth, a.rate)
        if a.interval is not None:
            fields["interval_s"] = self.unit(path + ("interval",), parse_delay, a.interval)
            if fields["interval_s"] == 0:
                self.p.error(
                    path + ("interval",),
                    f"cbr {a.name}: interval 0 would send without pause; give a positive interval "
                    "or a rate",
                )
        if fields.get("rate_bps") == 0 and a.interval is None:
            self.p.error(
                path + ("rate",),
                f"cbr {a.name}: rate 0 would send nothing; give a positive rate or an interval",
            )
        if fields.get("packet_size_bytes") == 0:
            self.p.error(
                path + ("packet_size",),
                f"cbr {a.name}: packet size must be at least 1 byte",
            )
        fields = {k: v for k, v in fields.items() if v is not None}
        return ir.Application.model_construct(
            name=a.name,
            kind=a.type,
            agent=a.agent,
            max_packets=a.max_packets,
            random=bool(a.random),
            **fields,
        )

    def program(self, i: int, prog: doc.ProgramDoc) -> ir.Program:
        path: Path_ = ("programs", i)
        self.need(path + ("node",), prog.node, {"node"}, f"program {prog.name}: node")
        if prog.node in {n.name for n in self.doc.nodes if n.simulated}:
            self.p.error(path + ("node",), command_on_simulated(f"program {prog.name}", prog.node))
        if not prog.command.strip():
            self.p.error(
                path + ("command",),
                f"program {prog.name} has an empty command; set one with `$prog set command ...`",
            )
        timeout = (
            self.unit(path + ("timeout",), parse_delay, prog.timeout)
            if prog.timeout is not None
            else None
        )
        return ir.Program.model_construct(
            name=prog.name,
            node=prog.node,
            command=prog.command,
            dir=prog.dir,
            timeout_s=timeout or None,
            expected_exit_code=prog.expected_exit_code or 0,
        )

    # -- events --------------------------------------------------------------------------

    def group(self, i: int, g: doc.GroupDoc) -> ir.Group:
        path: Path_ = ("groups", i)
        kinds = set()
        for j, member in enumerate(g.members):
            if member not in self.kinds:
                self.p.error(
                    path + ("members", j),
                    f"group {g.name}: member '{member}' does not exist",
                )
            else:
                kinds.add(self.kinds[member])
        if len(kinds) > 1:
            self.p.error(
                path,
                f"group {g.name} mixes {', '.join(sorted(kinds))}; a group holds objects of one "
                "kind",
            )
        if not g.members:
            self.p.error(path, f"group {g.name} is empty; add members")
        return ir.Group.model_construct(name=g.name, members=tuple(g.members))

    def action(
        self, path: Path_, a: doc.ActionDoc, time: float | None = None
    ) -> ir.Action | ir.Event:
        args = tuple(_text(x) for x in (a.args or []))
        fields = dict(object=a.object, verb=a.verb, args=args, where=self._where(path))
        groups = {g.name: g.members for g in self.doc.groups}
        names = self.link_names[0] + self.link_names[1]
        links = dict(zip(names, self.doc.links + self.doc.lans, strict=True))
        members = {
            name: [m if isinstance(m, str) else m.node for m in ld.members]
            for name, ld in links.items()
        }
        for field, message in check_action(self.kinds, groups, members, a.object, a.verb, args):
            self.p.error(path + (field,), message)
        if time is None:
            return ir.Action.model_construct(**fields)
        return ir.Event.model_construct(**fields, time_s=time)

    def events(self, path: Path_, events: list[doc.EventDoc]) -> list[ir.Event]:
        out = []
        for j, e in enumerate(events):
            time = self.unit(path + (j, "at"), parse_time, e.at)
            out.append(self.action(path + (j,), e, time if time is not None else 0.0))
        return sorted(out, key=lambda e: e.time_s)  # stable: same-time events keep file order

    def inert(self, i: int, x: doc.InertDoc) -> ir.Inert:
        reason = INERT_REASONS.get(x.command, "nestbed has no equivalent")
        self.p.warn(
            ("inert", i),
            f"{x.command} has no effect here ({reason}); it is recorded in the experiment and "
            "otherwise ignored",
        )
        return ir.Inert.model_construct(
            command=x.command, args=tuple(x.args), where=self._where(("inert", i))
        )

    def _where(self, path: Path_) -> ir.Where | None:
        file, line = self.p.locate(path)
        return ir.Where(file=file, line=line) if line is not None else None


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _valid_port(port: ir.Port) -> bool:
    try:
        port.interface  # noqa: B018 - parsing is the check
    except ValueError:
        return False
    return True


def _valid_ip(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _free_subnet(
    netmask: str, start: int, claimed: list[ipaddress.IPv4Network]
) -> tuple[ipaddress.IPv4Network, int]:
    prefix = ipaddress.IPv4Network(f"0.0.0.0/{netmask}").prefixlen
    if prefix < 24:
        raise ValueError(
            f"netmask {netmask} is wider than /24, so no automatic subnet fits; give the "
            "members' addresses with tb-set-ip-link or ip"
        )
    # Block k is 10.(1 + k // 256).(k % 256).0: 10.1.1.0, 10.1.2.0, ... 10.1.255.0, 10.2.0.0 ...
    for k in range(start, 254 * 256):
        subnet = ipaddress.IPv4Network(f"10.{1 + k // 256}.{k % 256}.0/{prefix}")
        if not any(subnet.overlaps(c) for c in claimed):
            return subnet, k + 1
    raise ValueError(
        "the automatic address range 10.1.1.0-10.254.255.0 is used up; give addresses explicitly"
    )


def derive_name(text: str) -> str:
    """A valid experiment name made from TEXT: other characters become '-', runs of '-' one."""
    name = re.sub(r"-+", "-", re.sub(r"[^-0-9A-Za-z]", "-", text)).strip("-")
    return name or "experiment"


_NS2_MULTIPLIER = re.compile(r"^\s*([-+0-9.eE]+)\s*([kmg])(b|bps)?\s*$")


def parse_ns2_bandwidth(value: str | int | float) -> int:
    """Bits per second as ns-2 reads them: also lowercase multipliers (`1mb`, `10kb`, `5m`)."""
    match = _NS2_MULTIPLIER.match(str(value)) if isinstance(value, str) else None
    if match:
        value = f"{match.group(1)}{match.group(2).upper()}b"
    return parse_bandwidth(value)
