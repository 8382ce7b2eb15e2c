"""The serialization formats compared: CDR, XML (DOM, SAX), JSON, YAML (full, compact), MessagePack.

Each turns a `FlightPlan` into bytes and back; all but CDR go through `records.to_tree`.
"""

from __future__ import annotations

import json
import xml.dom.minidom
import xml.etree.ElementTree as ET
import xml.sax
import xml.sax.handler
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import yaml

from nestbed.errors import UserError
from nestbed.studies.pubsub.records import FlightPlan, RecordError, from_tree, to_tree

# libyaml's C emitter and parser when present: the paper compares parsers, not pure Python.
_YamlDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

ITEM = "item"  # the tag of each element of a sequence in XML


@dataclass(frozen=True, kw_only=True)
class Format:
    """A named serializer and its matching deserializer for flight plans."""

    name: str
    flexible: bool  # the stream names its fields, so a reader needs no shared schema
    serialize: Callable[[FlightPlan], bytes]
    deserialize: Callable[[bytes], FlightPlan]


# --- CDR: the IDL types' own XCDR encoding, as DDS puts it on the wire.


def _cdr_serialize(record: FlightPlan) -> bytes:
    return record.serialize()


def _cdr_deserialize(data: bytes) -> FlightPlan:
    return FlightPlan.deserialize(data)


# --- JSON, compact separators: the format at its smallest.


def _json_serialize(record: FlightPlan) -> bytes:
    return json.dumps(to_tree(record), separators=(",", ":")).encode()


def _json_deserialize(data: bytes) -> FlightPlan:
    return from_tree(FlightPlan, json.loads(data))


# --- YAML: block style (indentation) and flow style (brackets), as the paper's two variants.


def _yaml_dump(record: FlightPlan, *, flow: bool) -> bytes:
    text = yaml.dump(
        to_tree(record),
        Dumper=_YamlDumper,
        default_flow_style=flow,
        sort_keys=False,
        width=2**31 - 1,  # no line folding: folding adds bytes and is not structure
    )
    return text.encode()


def _yaml_load(data: bytes) -> FlightPlan:
    return from_tree(FlightPlan, yaml.load(data, Loader=_YamlLoader))


# --- MessagePack: a binary format that still names every field.


def _msgpack_serialize(record: FlightPlan) -> bytes:
    return msgpack.packb(to_tree(record))


def _msgpack_deserialize(data: bytes) -> FlightPlan:
    return from_tree(FlightPlan, msgpack.unpackb(data))


# --- XML: one element per field named after it; a sequence holds <item> elements. Both XML
# variants serialize through a tree, as the paper's did (its footnote 12).


def _xml_serialize(record: FlightPlan) -> bytes:
    root = ET.Element("FlightPlan")
    _xml_fill(root, to_tree(record))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _xml_fill(parent: ET.Element, value: Any) -> None:
    if isinstance(value, dict):
        for name, child in value.items():
            _xml_fill(ET.SubElement(parent, name), child)
    elif isinstance(value, list):
        for child in value:
            _xml_fill(ET.SubElement(parent, ITEM), child)
    elif isinstance(value, bool):
        parent.text = "true" if value else "false"
    elif isinstance(value, float):
        parent.text = repr(value)  # repr is the shortest text that reads back to the same float
    else:
        parent.text = str(value)


def _xml_dom_deserialize(data: bytes) -> FlightPlan:
    try:
        document = xml.dom.minidom.parseString(data)
    except Exception as exc:  # expat raises its own ExpatError; the caller wants ours
        raise RecordError(f"not well-formed XML: {exc}") from exc
    root = document.documentElement
    return from_tree(FlightPlan, _dom_tree(root), text=True)


def _dom_tree(element: xml.dom.minidom.Element) -> Any:
    children = [n for n in element.childNodes if n.nodeType == n.ELEMENT_NODE]
    if not children:
        # A leaf, or an empty sequence: `from_tree` knows which from the schema.
        return "".join(n.data for n in element.childNodes if n.nodeType == n.TEXT_NODE)
    if all(c.tagName == ITEM for c in children):
        return [_dom_tree(c) for c in children]
    return _mapping([(c.tagName, _dom_tree(c)) for c in children])


class _SaxBuilder(xml.sax.handler.ContentHandler):
    """Builds the same tree as `_dom_tree` from parse events, without a document in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, list[tuple[str, Any]], list[str]]] = []
        self.root: Any = None

    def startElement(self, name: str, attrs: Any) -> None:  # SAX names its callbacks
        self.stack.append((name, [], []))

    def characters(self, content: str) -> None:
        self.stack[-1][2].append(content)

    def endElement(self, name: str) -> None:
        _, children, text = self.stack.pop()
        if not children:
            value: Any = "".join(text)
        elif all(tag == ITEM for tag, _ in children):
            value = [v for _, v in children]
        else:
            value = _mapping(children)
        if self.stack:
            self.stack[-1][1].append((name, value))
        else:
            self.root = value


def _xml_sax_deserialize(data: bytes) -> FlightPlan:
    builder = _SaxBuilder()
    try:
        xml.sax.parseString(data, builder)
    except xml.sax.SAXException as exc:
        raise RecordError(f"not well-formed XML: {exc}") from exc
    return from_tree(FlightPlan, builder.root, text=True)


def _mapping(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A repeated tag would silently overwrite its twin in a dict; the record has none.
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise RecordError(f"repeated element among {[tag for tag, _ in pairs]}")
    return mapping


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(name="cdr", flexible=False, serialize=_cdr_serialize, deserialize=_cdr_deserialize),
        Format(
            name="xml-dom",
            flexible=True,
            serialize=_xml_serialize,
            deserialize=_xml_dom_deserialize,
        ),
        Format(
            name="xml-sax",
            flexible=True,
            serialize=_xml_serialize,
            deserialize=_xml_sax_deserialize,
        ),
        Format(
            name="json", flexible=True, serialize=_json_serialize, deserialize=_json_deserialize
        ),
        Format(
            name="yaml-full",
            flexible=True,
            serialize=lambda r: _yaml_dump(r, flow=False),
            deserialize=_yaml_load,
        ),
        Format(
            name="yaml-compact",
            flexible=True,
            serialize=lambda r: _yaml_dump(r, flow=True),
            deserialize=_yaml_load,
        ),
        Format(
            name="msgpack",
            flexible=True,
            serialize=_msgpack_serialize,
            deserialize=_msgpack_deserialize,
        ),
    )
}


def get_format(name: str) -> Format:
    """The format called `name`, or a `UserError` listing the known ones."""
    try:
        return FORMATS[name]
    except KeyError:
        raise UserError(f"unknown format {name!r}; known: {', '.join(FORMATS)}") from None
