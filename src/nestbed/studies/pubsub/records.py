"""The flight-plan record, shaped like the paper's AVENUE type, and a seeded generator of them.

The schema is defined once, as Cyclone DDS IDL structs (which are dataclasses); every format
reaches it through `to_tree`/`from_tree` or, for CDR, through the IDL types themselves.
"""

# No `from __future__ import annotations`: Cyclone DDS resolves field types at run time.
import collections.abc
import dataclasses
import random
import string
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import float64, int32, int64, sequence

from nestbed.errors import UserError


@dataclass
class Position(IdlStruct, typename="avenue::Position"):
    latitude_deg: float64
    longitude_deg: float64
    altitude_ft: float64


@dataclass
class Aircraft(IdlStruct, typename="avenue::Aircraft"):
    registration: str
    icao_type: str
    wake_category: str
    equipment: str
    max_speed_kt: float64


@dataclass
class Aerodrome(IdlStruct, typename="avenue::Aerodrome"):
    icao_code: str
    name: str
    position: Position
    runway: str


@dataclass
class Waypoint(IdlStruct, typename="avenue::Waypoint"):
    name: str
    position: Position
    eta_s: int64
    speed_kt: float64
    flight_level: int32
    overflown: bool


@dataclass
class TrajectoryPoint(IdlStruct, typename="avenue::TrajectoryPoint"):
    time_s: int64
    position: Position
    ground_speed_kt: float64
    vertical_rate_fpm: float64
    mass_kg: float64


@dataclass
class SectorCrossing(IdlStruct, typename="avenue::SectorCrossing"):
    sector_id: str
    entry_s: int64
    exit_s: int64
    entry_level: int32
    exit_level: int32


@dataclass
class FlightPlan(IdlStruct, typename="avenue::FlightPlan"):
    flight_id: int64
    callsign: str
    revision: int32
    is_active: bool
    aircraft: Aircraft
    departure: Aerodrome
    destination: Aerodrome
    alternates: sequence[Aerodrome]
    route: sequence[Waypoint]
    trajectory: sequence[TrajectoryPoint]
    sectors: sequence[SectorCrossing]
    remarks: str
    cruise_speed_kt: float64
    requested_level: int32
    off_block_s: int64


# Bytes of each primitive's value alone, as CDR stores it: the paper's "instance content".
PRIMITIVE_BYTES = {"bool": 1, "int32": 4, "int64": 8, "float64": 8}
PRIMITIVES = {"bool", "int32", "int64", "float64", "str"}

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Kind:
    """What one field holds: a primitive (by IDL name), a nested struct, or a sequence."""

    primitive: str | None = None
    struct: type | None = None
    element: "Kind | None" = None


def _kind(hint: Any) -> Kind:
    if hint is bool:
        return Kind(primitive="bool")
    if hint is str:
        return Kind(primitive="str")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return Kind(struct=hint)
    if typing.get_origin(hint) is typing.Annotated:
        base, *meta = typing.get_args(hint)
        if meta and meta[0] in PRIMITIVES:
            return Kind(primitive=meta[0])
        if typing.get_origin(base) in (collections.abc.Sequence, list):
            return Kind(element=_kind(typing.get_args(base)[0]))
    raise TypeError(f"field type {hint!r} is not part of the record schema")


@cache
def fields_of(cls: type) -> tuple[tuple[str, Kind], ...]:
    """The fields of a schema struct, in declaration order, with their kinds."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((f.name, _kind(hints[f.name])) for f in dataclasses.fields(cls))


def to_tree(record: Any) -> dict[str, Any]:
    """The record as nested dicts and lists of primitives, in field order."""
    return {
        name: _value_to_tree(getattr(record, name), kind) for name, kind in fields_of(type(record))
    }


def _value_to_tree(value: Any, kind: Kind) -> Any:
    if kind.struct is not None:
        return to_tree(value)
    if kind.element is not None:
        return [_value_to_tree(v, kind.element) for v in value]
    return value


def from_tree(cls: type[T], tree: Any, *, text: bool = False, where: str = "") -> T:
    """Rebuild a record from `to_tree`'s shape; with `text`, leaves are strings to parse.

    Strict on purpose: a missing or unknown field, or a leaf of the wrong type, is an error,
    so a format that silently drops or renames a field fails its round trip loudly.
    """
    where = where or cls.__name__
    if not isinstance(tree, dict):
        raise RecordError(f"{where}: expected a mapping, got {type(tree).__name__}")
    fields = fields_of(cls)
    names = [name for name, _ in fields]
    missing = [n for n in names if n not in tree]
    unknown = [k for k in tree if k not in names]
    if missing or unknown:
        raise RecordError(f"{where}: missing fields {missing}, unknown fields {unknown}")
    values = {n: _value_from_tree(tree[n], k, text, f"{where}.{n}") for n, k in fields}
    return cls(**values)


def _value_from_tree(value: Any, kind: Kind, text: bool, where: str) -> Any:
    if kind.struct is not None:
        return from_tree(kind.struct, value, text=text, where=where)
    if kind.element is not None:
        if text and value == "":
            value = []  # XML cannot tell an empty sequence from empty text; the schema can
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a sequence, got {type(value).__name__}")
        return [
            _value_from_tree(v, kind.element, text, f"{where}[{i}]") for i, v in enumerate(value)
        ]
    assert kind.primitive is not None
    return _leaf(value, kind.primitive, text, where)


def _leaf(value: Any, primitive: str, text: bool, where: str) -> Any:
    if text:
        if not isinstance(value, str):
            raise RecordError(f"{where}: expected text, got {type(value).__name__}")
        try:
            if primitive == "bool":
                return {"true": True, "false": False}[value]
            if primitive in ("int32", "int64"):
                return int(value)
            if primitive == "float64":
                return float(value)
        except (KeyError, ValueError) as exc:
            raise RecordError(f"{where}: {value!r} is not a {primitive}") from exc
        return value
    # bool is an int in Python; neither may stand in for the other.
    expected = {"bool": bool, "int32": int, "int64": int, "float64": float, "str": str}[primitive]
    if type(value) is not expected:
        raise RecordError(f"{where}: expected {primitive}, got {type(value).__name__}")
    return value


class RecordError(UserError):
    """A serialized stream that does not hold a complete, well-typed record."""


def content_bytes(record: Any) -> int:
    """The instance content: the bytes of every leaf value, with no framing or names.

    Numbers count their binary width, strings their UTF-8 length; sequence lengths, padding,
    tags and field names are not content, they are what a format adds.
    """
    return sum(_content(getattr(record, n), k) for n, k in fields_of(type(record)))


def _content(value: Any, kind: Kind) -> int:
    if kind.struct is not None:
        return content_bytes(value)
    if kind.element is not None:
        return sum(_content(v, kind.element) for v in value)
    if kind.primitive == "str":
        return len(value.encode("utf-8"))
    return PRIMITIVE_BYTES[kind.primitive or ""]


@dataclass(frozen=True, kw_only=True)
class Shape:
    """How many of each repeated part a generated record has; the defaults give ≈100 KB JSON."""

    alternates: int = 3
    waypoints: int = 60
    trajectory_points: int = 330
    sectors: int = 40
    remarks_chars: int = 2000


ALNUM = string.ascii_uppercase + string.digits
TEXT = ALNUM + " .,-/"


def generate(seed: int, shape: Shape = Shape()) -> FlightPlan:
    """A flight plan with random content drawn from `seed` alone."""
    rng = random.Random(seed)

    def word(n: int, alphabet: str = ALNUM) -> str:
        return "".join(rng.choices(alphabet, k=n))

    def position() -> Position:
        return Position(
            latitude_deg=rng.uniform(-90, 90),
            longitude_deg=rng.uniform(-180, 180),
            altitude_ft=rng.uniform(0, 45_000),
        )

    def aerodrome() -> Aerodrome:
        return Aerodrome(
            icao_code=word(4),
            name=word(rng.randint(8, 24), TEXT),
            position=position(),
            runway=word(3),
        )

    start_s = rng.randint(1_600_000_000, 1_900_000_000)
    return FlightPlan(
        flight_id=rng.getrandbits(63),
        callsign=word(7),
        revision=rng.randint(0, 2**31 - 1),
        is_active=rng.random() < 0.5,
        aircraft=Aircraft(
            registration=word(6),
            icao_type=word(4),
            wake_category=rng.choice("LMHJ"),
            equipment=word(rng.randint(8, 20)),
            max_speed_kt=rng.uniform(250, 600),
        ),
        departure=aerodrome(),
        destination=aerodrome(),
        alternates=[aerodrome() for _ in range(shape.alternates)],
        route=[
            Waypoint(
                name=word(5),
                position=position(),
                eta_s=start_s + 60 * i,
                speed_kt=rng.uniform(150, 550),
                flight_level=rng.randint(0, 450),
                overflown=rng.random() < 0.5,
            )
            for i in range(shape.waypoints)
        ],
        trajectory=[
            TrajectoryPoint(
                time_s=start_s + 10 * i,
                position=position(),
                ground_speed_kt=rng.uniform(150, 550),
                vertical_rate_fpm=rng.uniform(-3000, 3000),
                mass_kg=rng.uniform(40_000, 400_000),
            )
            for i in range(shape.trajectory_points)
        ],
        sectors=[
            SectorCrossing(
                sector_id=word(6),
                entry_s=start_s + 300 * i,
                exit_s=start_s + 300 * i + 299,
                entry_level=rng.randint(0, 450),
                exit_level=rng.randint(0, 450),
            )
            for i in range(shape.sectors)
        ],
        remarks=word(shape.remarks_chars, TEXT),
        cruise_speed_kt=rng.uniform(250, 550),
        requested_level=rng.randint(0, 450),
        off_block_s=start_s,
    )
