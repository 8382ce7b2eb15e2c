"""Front ends: read an experiment file (ns-2 Tcl or YAML) and resolve it into the IR."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

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

        document, locations = yaml_front_end.read(text, path.name)
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
    known = dict(document.parameters or {})
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise UserError(
            f"{file}: parameter {unknown[0]} is not declared; declare it under `parameters:` "
            f"(declared: {', '.join(sorted(known)) or 'none'})"
        )
    raise UserError(
        f"{file}: parameters of YAML experiments are declared but not yet substituted into "
        "fields; use an ns file with $ns define-template-parameter for parameter sweeps"
    )
