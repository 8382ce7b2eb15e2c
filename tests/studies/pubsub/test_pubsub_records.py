"""The flight-plan schema and generator: determinism, size, content bytes, strict rebuilding."""

from __future__ import annotations

import json

import pytest

from nestbed.studies.pubsub.records import (
    FlightPlan,
    Position,
    RecordError,
    SectorCrossing,
    Shape,
    content_bytes,
    fields_of,
    from_tree,
    generate,
    to_tree,
)


def _declarations(cls: type, seen: set[tuple[type, str]]) -> set[tuple[type, str]]:
    for name, kind in fields_of(cls):
        seen.add((cls, name))
        while kind.element is not None:
            kind = kind.element
        if kind.struct is not None:
            _declarations(kind.struct, seen)
    return seen


def test_the_schema_has_about_thirty_nested_fields_like_avenue():
    # Each struct's fields counted once, though Position appears in three places.
    assert 30 <= len(_declarations(FlightPlan, set())) <= 50


def test_the_same_seed_gives_the_same_record_and_another_seed_another():
    assert generate(7) == generate(7)
    assert generate(7) != generate(8)


def test_a_default_record_is_about_100_kb_as_json():
    size = len(json.dumps(to_tree(generate(0)), separators=(",", ":")))
    assert 90_000 <= size <= 110_000, size


def test_content_bytes_counts_binary_widths_and_utf8_lengths():
    assert content_bytes(Position(latitude_deg=1.0, longitude_deg=2.0, altitude_ft=3.0)) == 24
    crossing = SectorCrossing(sector_id="é12", entry_s=1, exit_s=2, entry_level=3, exit_level=4)
    assert content_bytes(crossing) == 4 + 8 + 8 + 4 + 4  # "é" is two bytes in UTF-8


def test_tree_round_trip_is_exact():
    record = generate(3)
    assert from_tree(FlightPlan, to_tree(record)) == record


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop("remarks"), r"missing fields \['remarks'\]"),
        (lambda t: t.update(extra=1), r"unknown fields \['extra'\]"),
        (lambda t: t["route"][0]["position"].pop("altitude_ft"), r"FlightPlan.route\[0\].position"),
        (lambda t: t.update(revision=True), r"FlightPlan.revision: expected int32, got bool"),
        (lambda t: t.update(cruise_speed_kt=1), r"expected float64, got int"),
        (lambda t: t.update(route={}), r"FlightPlan.route: expected a sequence"),
    ],
)
def test_from_tree_rejects_a_dropped_added_or_mistyped_field(change, message):
    tree = to_tree(generate(1, Shape(waypoints=2, trajectory_points=2)))
    change(tree)
    with pytest.raises(RecordError, match=message):
        from_tree(FlightPlan, tree)
