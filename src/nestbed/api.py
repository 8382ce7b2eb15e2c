"""Building an experiment in Python, with the same meaning and checks as the file formats.

    exp = Experiment("x")
    a, b = exp.node("a"), exp.node("b")
    exp.link(a, b, bandwidth="10Mb", delay="20ms")
    ir = exp.build()            # nestbed.model.Experiment, or SpecError naming file:line

The builder writes a document (``nestbed.spec.document``) and records the file:line of each
call, so a mistake is reported at the line of the script that made it.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nestbed.model import ir
from nestbed.spec import document as doc
from nestbed.spec.problems import Location, Problems, describe_validation_error
from nestbed.spec.resolve import resolve


@dataclass(frozen=True)
class Ref:
    """A handle to a declared object; pass it (or its name) wherever an object is expected."""

    name: str

    def __str__(self) -> str:
        return self.name


def _name(obj: Ref | str) -> str:
    return obj.name if isinstance(obj, Ref) else obj


class Experiment:
    """An experiment under construction."""

    def __init__(self, name: str):
        self.name = name
        self._data: dict[str, Any] = {"name": name}
        self._locations: dict[str, Location] = {}
        self._link_order: list[str] = []
        self._file = "<python>"

    def _add(self, section: str, item: dict[str, Any]) -> int:
        items = self._data.setdefault(section, [])
        items.append({k: v for k, v in item.items() if v is not None})
        frame = sys._getframe(2)
        self._file = Path(frame.f_code.co_filename).name
        self._locations[f"{section}.{len(items) - 1}"] = (self._file, frame.f_lineno)
        if section in ("links", "lans"):
            self._link_order.append(f"{section}.{len(items) - 1}")
        return len(items) - 1

    def node(self, name: str, **settings: Any) -> Ref:
        """A node; settings are the YAML node keys (os, hardware, cpu, memory, ...)."""
        self._add("nodes", {"name": name, **settings})
        return Ref(name)

    def link(self, a: Ref | str, b: Ref | str, *, name: str | None = None, **shaping: Any) -> Ref:
        """A link between two nodes; shaping keys as in YAML (bandwidth, delay, loss, ...)."""
        name = name or self._auto_name("link")
        self._add("links", {"name": name, "members": [_name(a), _name(b)], **shaping})
        return Ref(name)

    def lan(self, members: list[Ref | str], *, name: str | None = None, **shaping: Any) -> Ref:
        """A LAN; delay and loss are what a packet from one member to another sees."""
        name = name or self._auto_name("lan")
        self._add("lans", {"name": name, "members": [_name(m) for m in members], **shaping})
        return Ref(name)

    def _auto_name(self, kind: str) -> str:
        # Named now, so the returned handle and the IR agree whatever is declared later.
        used = {
            item.get("name")
            for items in self._data.values()
            if isinstance(items, list)
            for item in items
        }
        counter = 0
        while f"{kind}{counter}" in used:
            counter += 1
        return f"{kind}{counter}"

    def agent(self, name: str, type: str, node: Ref | str, **settings: Any) -> Ref:  # noqa: A002
        self._add("agents", {"name": name, "type": type, "node": _name(node), **settings})
        return Ref(name)

    def connect(self, a: Ref | str, b: Ref | str) -> None:
        """Connects two agents (ns-2's `$ns connect`)."""
        agents = {x["name"]: x for x in self._data.get("agents", [])}
        for one, other in ((_name(a), _name(b)), (_name(b), _name(a))):
            if one in agents:
                agents[one]["peer"] = other

    def application(
        self,
        name: str,
        type: str,  # noqa: A002 -- `type` is the public keyword, as in the YAML key
        agent: Ref | str,
        **settings: Any,
    ) -> Ref:
        self._add(
            "applications",
            {"name": name, "type": type, "agent": _name(agent), **settings},
        )
        return Ref(name)

    def program(self, name: str, node: Ref | str, command: str, **settings: Any) -> Ref:
        self._add(
            "programs",
            {"name": name, "node": _name(node), "command": command, **settings},
        )
        return Ref(name)

    def at(self, time: float | str, obj: Ref | str, verb: str, *args: Any) -> None:
        """An event: at TIME, OBJECT VERB ARGS (`exp.at(10, link0, "down")`)."""
        self._add(
            "events",
            {
                "at": time,
                "object": _name(obj),
                "verb": verb,
                "args": [str(a) for a in args] or None,
            },
        )

    def routing(self, mode: str) -> None:
        self._data["routing"] = mode

    def simulation(self, *, hard_limit: str | float) -> None:
        """The simulated part's settings: ``hard_limit``, the lag behind real time a run may
        have before it is marked (`"2ms"`; 5 ms when not given)."""
        self._data["simulation"] = {"hard_limit": hard_limit}
        frame = sys._getframe(1)
        self._file = Path(frame.f_code.co_filename).name
        self._locations["simulation.hard_limit"] = (self._file, frame.f_lineno)

    def document(self) -> doc.ExperimentDoc:
        try:
            return doc.ExperimentDoc.model_validate(self._data)
        except ValidationError as exc:
            problems = Problems(self._file, self._locations)
            describe_validation_error(exc, problems)
            problems.raise_if_any()
            raise

    def build(self) -> ir.Experiment:
        """The IR; raises ``SpecError`` with every problem, each at the line that caused it."""
        document = self.document()
        text = repr(self._data)
        source = ir.Source(
            format="python",
            file=self._file,
            sha256=hashlib.sha256(text.encode()).hexdigest(),
        )
        return resolve(
            document,
            file=self._file,
            source=source,
            locations=self._locations,
            link_order=self._link_order,
        )
