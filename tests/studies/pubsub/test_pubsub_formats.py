"""Every format round-trips every record exactly, names its fields if flexible, and is sized sanely."""

from __future__ import annotations

import pytest

from nestbed.errors import UserError
from nestbed.studies.pubsub.formats import FORMATS, get_format
from nestbed.studies.pubsub.records import (
    FlightPlan,
    RecordError,
    Shape,
    content_bytes,
    fields_of,
    generate,
)

NAMES = list(FORMATS)
SEEDS = [0, 1, 2]
EMPTY = Shape(alternates=0, waypoints=0, trajectory_points=0, sectors=0, remarks_chars=0)


@pytest.fixture(scope="module")
def records():
    return {seed: generate(seed) for seed in SEEDS}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_round_trip_is_exact(name, seed, records):
    fmt = FORMATS[name]
    stream = fmt.serialize(records[seed])
    assert isinstance(stream, bytes)
    assert fmt.deserialize(stream) == records[seed]


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_with_empty_sequences_and_strings(name):
    record = generate(5, EMPTY)
    assert FORMATS[name].deserialize(FORMATS[name].serialize(record)) == record


def _names(cls: type) -> set[str]:
    names = set()
    for name, kind in fields_of(cls):
        names.add(name)
        while kind.element is not None:
            kind = kind.element
        if kind.struct is not None:
            names |= _names(kind.struct)
    return names


@pytest.mark.parametrize("name", [n for n in NAMES if FORMATS[n].flexible])
def test_a_flexible_stream_names_every_field(name, records):
    stream = FORMATS[name].serialize(records[0])
    assert {n for n in _names(FlightPlan) if n.encode() not in stream} == set()


@pytest.mark.parametrize("name", [n for n in NAMES if FORMATS[n].flexible])
def test_a_stream_missing_a_field_is_refused_not_silently_accepted(name, records):
    stream = FORMATS[name].serialize(records[0])
    # Renaming a field in the stream both drops it and adds an unknown one.
    renamed = stream.replace(b"cruise_speed_kt", b"cruise_speed_kz")
    assert renamed != stream
    with pytest.raises(RecordError, match="cruise_speed_kt"):
        FORMATS[name].deserialize(renamed)


def test_a_truncated_cdr_stream_is_refused(records):
    stream = FORMATS["cdr"].serialize(records[0])
    with pytest.raises(Exception):  # noqa: B017 (Cyclone DDS raises its own errors)
        FORMATS["cdr"].deserialize(stream[: len(stream) // 2])


def test_efficiency_orders_the_formats_as_the_paper_found(records):
    content = content_bytes(records[0])
    efficiency = {n: content / len(f.serialize(records[0])) for n, f in FORMATS.items()}
    assert all(0 < e <= 1 for e in efficiency.values()), efficiency
    assert efficiency["cdr"] > 0.9  # only alignment and lengths are added
    assert efficiency["cdr"] > efficiency["msgpack"] > efficiency["json"]
    assert efficiency["json"] > efficiency["yaml-full"] > efficiency["xml-dom"]
    assert efficiency["yaml-compact"] > efficiency["yaml-full"]
    assert efficiency["xml-dom"] == efficiency["xml-sax"]  # one serializer, two parsers


def test_an_unknown_format_lists_the_known_ones():
    with pytest.raises(UserError, match="unknown format 'protobuf'; known: cdr, xml-dom"):
        get_format("protobuf")
