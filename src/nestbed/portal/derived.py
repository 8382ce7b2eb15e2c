"""What the portal's pages derive from an experiment's definition, computed once and kept.

A 1 000-node experiment's IR is 3.4 MB of JSON: parsing it alone is some 30 ms on an idle
machine and ten times that under load, and its topology (elements, layered layout, node and
link tables, the elements as JSON) as much again. A definition changes only when its IR
does, so what comes of it is kept by the stored record's IR digest (``ir_sha256``); the
topology is kept by that digest, the hosts the nodes run on and the stamp of the file of
dragged positions, so a drag or a new placement is seen at the next request.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup

from nestbed.portal import graph
from nestbed.portal.render import fragment

Value = TypeVar("Value")


class Kept(Generic[Value]):
    """A small least-recently-used store of values made by ``make`` for a key. Two
    requests that both miss may both make it (the same value): no lock is held while
    making, so a slow one never holds up the pages of other experiments."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.values: OrderedDict[Hashable, Value] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], Value]) -> Value:
        with self.lock:
            if key in self.values:
                self.values.move_to_end(key)
                return self.values[key]
        value = make()
        with self.lock:
            self.values[key] = value
            while len(self.values) > self.size:
                self.values.popitem(last=False)
        return value


@dataclass(frozen=True)
class Definition:
    """An experiment's IR and what the pages read of it."""

    ir: dict[str, Any]
    counts: dict[str, int]
    warnings: list[str]
    keys: frozenset[str]  # what positions may name: NODE and lan:NAME
    large: bool  # drawn simplified, beside a searchable table
    link_rows: list[dict[str, str]]


@dataclass(frozen=True)
class Topology:
    """The topology page's data: the elements as JSON safe inside a ``<script>``, and the
    node table's rows, also as HTML."""

    elements_json: Markup
    node_rows: list[dict[str, str]]
    node_table: Markup
    preset: bool  # every element has a position: the browser lays nothing out


DEFINITIONS: Kept[Definition] = Kept(16)
TOPOLOGIES: Kept[Topology] = Kept(8)


def definition(ir_sha256: str, ir_json: str) -> Definition:
    """The definition whose IR is ``ir_json`` (parsed once per digest)."""
    return DEFINITIONS.get(ir_sha256, lambda: _read(json.loads(ir_json)))


def _read(ir: dict[str, Any]) -> Definition:
    counts = {k: len(ir.get(k, [])) for k in ("nodes", "links", "lans", "programs", "events")}
    keys = {n["name"] for n in ir.get("nodes", [])} | {
        f"lan:{x['name']}" for x in ir.get("lans", [])
    }
    large = counts["nodes"] > graph.LARGE
    return Definition(
        ir=ir, counts=counts, keys=frozenset(keys), large=large,
        warnings=[w.get("message", "") for w in ir.get("warnings", [])],
        link_rows=[] if large else graph.link_rows(ir),  # a large one's page has no link table
    )  # fmt: skip


def node_table(rows: list[dict[str, str]]) -> Markup:
    """The node table's body."""
    return fragment("node_rows.html", node_rows=rows)


def topology(
    ir_sha256: str,
    found: Definition,
    hosts: dict[str, str],
    saved: Callable[[], dict[str, dict[str, float]]],
    saved_stamp: Hashable,
) -> Topology:
    """The topology of ``found`` with its nodes on ``hosts`` and the positions ``saved``
    returns (read only when the file's ``saved_stamp`` is new). A large one comes laid out
    in layers (computed here in linear time), the saved positions over them."""
    key = (ir_sha256, tuple(sorted(hosts.items())), saved_stamp)

    def make() -> Topology:
        at = saved()
        if found.large:
            at = {**graph.layered(found.ir), **at}
        elements = graph.elements(found.ir, at, hosts)
        rows = graph.rows(found.ir, hosts)
        return Topology(elements_json=htmlsafe_json_dumps(elements),
                        node_rows=rows, node_table=node_table(rows), preset=bool(at))  # fmt: skip

    return TOPOLOGIES.get(key, make)
