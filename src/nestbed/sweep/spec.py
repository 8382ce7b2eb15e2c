"""A sweep's description (YAML file or command-line flags) and the points it expands to:
grids, zipped lists and explicit points, repeated, optionally in a seeded random order."""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml

from nestbed.errors import UserError

MAX_POINTS = 10_000  # more runs than this need --max-points: each is a whole experiment


class SweepDoc(pydantic.BaseModel):
    """The sweep file: which experiment, which parameter values, how often, how."""

    model_config = pydantic.ConfigDict(extra="forbid")

    experiment: str
    grid: dict[str, list[Any]] = {}
    zip: list[dict[str, list[Any]]] = []
    points: list[dict[str, Any]] = []
    repetitions: int = pydantic.Field(default=1, ge=1)
    shuffle: bool = False
    seed: int = 0
    duration: float | None = pydantic.Field(default=None, gt=0)
    timeout: float | None = pydantic.Field(default=None, gt=0)
    parallel: int | str = 1  # a number or "auto"
    reuse_links: bool = False
    run_reports: bool = False  # each run's report.md and plots (a second or two per run)


@dataclass(frozen=True)
class Point:
    """One run of the sweep: a parameter setting and its repetition."""

    index: int  # of the setting, in the order of the description
    repetition: int
    parameters: dict[str, str]

    @property
    def key(self) -> str:
        return f"p{self.index:04d}-r{self.repetition}"


@dataclass(frozen=True)
class Sweep:
    experiment: Path
    doc: SweepDoc
    file: Path | None = None  # the sweep file, when there is one

    @property
    def parameter_names(self) -> list[str]:
        names: list[str] = []
        for setting in settings(self.doc):
            names += [n for n in setting if n not in names]
        return names


def load_sweep(path: Path) -> Sweep:
    """Reads a sweep file; the experiment's path is relative to the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(
            f"{path}: cannot read the sweep file ({exc.strerror}); check the path"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    doc = _validate(data, str(path))
    return Sweep((path.parent / doc.experiment).resolve(), doc, path)


def from_flags(
    experiment: Path, grid: Sequence[str], zipped: Sequence[str], **options: Any
) -> Sweep:
    """A sweep from `--grid NAME=V1,V2` and `--zip NAME=V1,V2` flags (zipped lists given
    together vary together), plus options as in the file."""
    doc: dict[str, Any] = {"experiment": str(experiment), "grid": {}, "zip": []}
    for flag, target in ((grid, "grid"), (zipped, "zip")):
        values = {}
        for item in flag:
            name, sep, listed = item.partition("=")
            if not sep or not name or not listed:
                raise UserError(
                    f"--{target} {item!r} is not NAME=V1,V2,...; write for example "
                    f"--{target} bw=1Mb,10Mb"
                )
            values[name] = [v for v in listed.split(",") if v != ""]
        if target == "grid":
            doc["grid"] = values
        elif values:
            doc["zip"] = [values]
    doc |= {k: v for k, v in options.items() if v is not None}
    return Sweep(experiment.resolve(), _validate(doc, "the command line"))


def with_options(sweep: Sweep, options: dict[str, Any]) -> Sweep:
    """The sweep with command-line options over its file's, validated as the file is."""
    given = {k: v for k, v in options.items() if v is not None}
    doc = _validate(sweep.doc.model_dump() | given, "the command line")
    return Sweep(sweep.experiment, doc, sweep.file)


def _validate(data: Any, where: str) -> SweepDoc:
    if not isinstance(data, dict):
        raise UserError(f"{where}: a sweep is a mapping with experiment, grid, zip, points ...")
    try:
        return SweepDoc.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "the sweep"
        raise UserError(f"{where}: {field}: {first['msg']}") from None


def settings(doc: SweepDoc) -> list[dict[str, str]]:
    """Every parameter setting: explicit points, then the grid's product with each zip group
    (zipped lists vary together and must have the same length)."""
    found = [{k: _text(v) for k, v in p.items()} for p in doc.points]
    named = list(doc.grid) + [n for group in doc.zip for n in group]
    twice = sorted({n for n in named if named.count(n) > 1})
    if twice:
        raise UserError(
            f"parameter {twice[0]} is given in more than one of grid and zip; give it once"
        )
    for group in doc.zip:
        lengths = {len(v) for v in group.values()}
        if len(lengths) > 1:
            raise UserError(
                f"zipped lists {', '.join(group)} have different lengths "
                f"({', '.join(str(len(v)) for v in group.values())}); give them the same length"
            )
    axes: list[list[dict[str, str]]] = [
        [{name: _text(v)} for v in values] for name, values in doc.grid.items()
    ]
    axes += [
        [{name: _text(values[i]) for name, values in group.items()} for i in range(lengths)]
        for group in doc.zip
        for lengths in [len(next(iter(group.values()), []))]
    ]
    if any(not axis for axis in axes):
        empty = [n for n, v in doc.grid.items() if not v] or ["a zipped group"]
        raise UserError(f"the grid is empty: {empty[0]} has no values; give it at least one")
    if axes:
        for combination in itertools.product(*axes):
            setting: dict[str, str] = {}
            for part in combination:
                setting |= part
            found.append(setting)
    if not found:
        raise UserError("the sweep has no points; give a grid, zipped lists or points")
    return found


def expand(sweep: Sweep, max_points: int = MAX_POINTS) -> list[Point]:
    """The sweep's runs: every setting × repetition, in description order or shuffled by the
    sweep's seed. (Each run is its own experiment, named after the sweep and the point, and
    linkd's random seeds derive from that name: they are in each run's manifest.)"""
    found = settings(sweep.doc)
    total = len(found) * sweep.doc.repetitions
    if total > max_points:
        raise UserError(
            f"the sweep has {total} runs ({len(found)} settings × {sweep.doc.repetitions} "
            f"repetitions), more than {max_points}; narrow it, or allow it with --max-points "
            f"{total}"
        )
    points = [
        Point(i, r, setting)
        for i, setting in enumerate(found)
        for r in range(sweep.doc.repetitions)
    ]
    if sweep.doc.shuffle:
        random.Random(sweep.doc.seed).shuffle(points)
    return points


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def workers(text: str) -> int:
    """How many runs go side by side: a number, or "auto" (half the cores, at least one)."""
    if text == "auto":
        return max((os.cpu_count() or 2) // 2, 1)
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise UserError(f"--parallel {text} is not a number of runs or auto")


def plot_spec(text: str, sweep: Sweep) -> tuple[str, str, str | None]:
    """A plot's METRIC, X and optional Y from "METRIC:X[:Y]", its axes checked against the
    sweep's parameters before anything runs."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise UserError(f"--plot {text!r} is not METRIC:X or METRIC:X:Y")
    for name in parts[1:]:
        if name not in sweep.parameter_names:
            known = ", ".join(sweep.parameter_names)
            raise UserError(f"--plot: the sweep has no parameter {name}; it has {known}")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None
