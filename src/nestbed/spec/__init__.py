"""Front ends: read an experiment file (ns-2 Tcl or YAML) and resolve it into the IR."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pydantic
import yaml as pyyaml

from nestbed.errors import Problem, SpecError, UserError
from nestbed.model import Experiment, Source, Where
from nestbed.model import Warning as IRWarning
from nestbed.spec.resolve import resolve

NS_SUFFIXES = {".ns", ".tcl"}
YAML_SUFFIXES = {".yaml", ".yml"}


@dataclass(frozen=True)
class Loaded:
    """An experiment read from a file, with the text it came from."""

    experiment: Experiment
    text: str
    format: str
    file: Path


def file_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in NS_SUFFIXES:
        return "ns"
    if suffix in YAML_SUFFIXES:
        return "yaml"
    raise UserError(
        f"{path}: cannot tell the file's format from its name; use .ns or .tcl for ns-2 files "
        "and .yaml or .yml for YAML files"
    )


def load(
    path: Path | str,
    *,
    name: str | None = None,
    parameters: dict[str, str] | None = None,
) -> Loaded:
    """Reads, translates and resolves an experiment file; raises ``SpecError`` on problems."""
    path = Path(path)
    fmt = file_format(path)
    if not path.is_file():
        raise UserError(f"{path}: no such experiment file; check the path")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: the file is not UTF-8 text (byte {exc.start} cannot be decoded); "
            "convert it, for example with `iconv -f latin1 -t utf-8`"
        ) from None
    source = Source(format=fmt, file=path.name, sha256=hashlib.sha256(text.encode()).hexdigest())  # type: ignore[arg-type]
    if fmt == "ns":
        from nestbed.spec import ns

        t = ns.translate(path, parameters=parameters)
        document, locations, link_order = t.document, t.locations, t.link_order
        warnings = [
            IRWarning(
                message=w.message,
                where=Where(file=w.file, line=w.line) if w.file else None,
            )
            for w in t.warnings
        ]
    else:
        from nestbed.spec import yaml as yaml_front_end

        document, locations = yaml_front_end.read(text, path.name, parameters)
        link_order = None  # file order, from the locations
        warnings = []
        if parameters:
            document = _apply_yaml_parameters(document, parameters, path.name)
    if name is not None:
        document = document.model_copy(update={"name": name})
    front_end_errors = t.errors if fmt == "ns" else []
    try:
        experiment = resolve(
            document,
            file=path.name,
            source=source,
            locations=locations,
            warnings=warnings,
            default_name=path.stem,
            link_order=link_order,
        )
    except SpecError as exc:
        # Report the script's own errors and the resolver's together, in file order.
        raise SpecError(_in_file_order(front_end_errors + exc.problems)) from None
    if front_end_errors:
        raise SpecError(_in_file_order(front_end_errors))
    return Loaded(experiment=experiment, text=text, format=fmt, file=path)


def _in_file_order(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.line is None, p.line or 0))


def _apply_yaml_parameters(document, parameters: dict[str, str], file: str):  # type: ignore[no-untyped-def]
    """Sets YAML fields named by dotted paths (``links.bottleneck.bandwidth=10Mb``: list items
    by their name, or by index) and declared ``parameters:`` by their name."""
    data = document.model_dump(by_alias=True, exclude_unset=True)
    declared = dict(data.get("parameters") or {})
    for path, raw in parameters.items():
        value = pyyaml.safe_load(raw) if raw.strip() else raw
        if "." not in path:
            if path not in declared:
                raise UserError(
                    f"{file}: parameter {path} is neither declared under `parameters:` nor a "
                    "field path like links.NAME.bandwidth; declare it or give the field's path"
                )
            declared[path] = value
            data["parameters"] = declared
            continue
        _set_field(data, path, value, file)
    try:
        return type(document).model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        given = ", ".join(parameters)
        raise UserError(f"{file}: after setting {given}: {where}: {first['msg']}") from None


def _set_field(data: dict, path: str, value: object, file: str) -> None:
    """Walks ``path`` through mappings and lists (items by name or index) and sets its end."""
    parts = path.split(".")
    node: object = data
    for depth, part in enumerate(parts[:-1]):
        here = ".".join(parts[: depth + 1])
        if isinstance(node, dict):
            if part not in node:
                raise UserError(f"{file}: field path {path}: there is no field {here}")
            node = node[part]
        elif isinstance(node, list):
            named = [x for x in node if isinstance(x, dict) and x.get("name") == part]
            if named:
                node = named[0]
            elif part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                names = ", ".join(str(x.get("name")) for x in node if isinstance(x, dict))
                raise UserError(
                    f"{file}: field path {path}: no item named {part} in {'.'.join(parts[:depth])}"
                    f" (its items: {names or 'unnamed; use an index'})"
                )
        else:
            raise UserError(f"{file}: field path {path}: {here} is a value, not a section")
    if not isinstance(node, dict):
        raise UserError(f"{file}: field path {path}: its parent is not a section")
    node[parts[-1]] = value
