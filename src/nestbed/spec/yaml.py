"""The YAML front end: an experiment file in YAML is a document (``spec.document``) as written.

Line numbers come from the YAML parser's node marks, so every problem points at its line.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from nestbed.errors import Problem, SpecError
from nestbed.spec.document import ExperimentDoc
from nestbed.spec.problems import (
    Location,
    Problems,
    describe_validation_error,
    path_key,
)

_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader where `on`/`no` stay strings (as in YAML 1.2) and `null` is a word.

    `null` is ns-2's name for the UDP sink agent (`type: null`), so only `~` and an empty value
    mean "nothing".
    """


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _NULL)]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(_NULL, re.compile(r"^(?:~|)$"), ["~", ""])


def _locations(node: yaml.Node, file: str, path: tuple = (), out: dict | None = None) -> dict:
    out = {} if out is None else out
    out[path_key(path)] = (file, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _locations(value, file, path + (key.value,), out)
            out[path_key(path + (key.value,))] = (file, key.start_mark.line + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _locations(item, file, path + (i,), out)
    return out


def read(
    text: str, file: str, parameters: dict[str, str] | None = None
) -> tuple[ExperimentDoc, dict[str, Location]]:
    """Parses YAML text into a document and the line of every key; `${NAME}` references to
    declared parameters are replaced (with PARAMETERS' values where given)."""
    try:
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
            data = loader.construct_document(root) if root is not None else None
            locations = _locations(root, file) if root is not None else {}
        finally:
            loader.dispose()
    except RecursionError:
        raise SpecError(
            [Problem("an alias refers to itself; remove the loop", file, None)]
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([Problem(f"this is not valid YAML: {problem}", file, line)]) from None
    if data is None:
        raise SpecError([Problem("the file is empty; describe nodes and links", file, 1)])
    if not isinstance(data, dict):
        raise SpecError(
            [
                Problem(
                    "the file must be a mapping with keys such as nodes and links",
                    file,
                    1,
                )
            ]
        )
    data = _substitute(data, parameters or {})
    try:
        return ExperimentDoc.model_validate(data), locations
    except ValidationError as exc:
        problems = Problems(file, locations)
        describe_validation_error(exc, problems)
        problems.raise_if_any()
        raise


_REFERENCE = re.compile(r"\$\{([-A-Za-z0-9_.]+)\}")


def _substitute(data: dict, overrides: dict[str, str]) -> dict:
    """DATA with every `${NAME}` of a parameter declared under `parameters:` replaced by its
    value (OVERRIDES, from `-p NAME=VALUE`, first). A string that is only the reference takes
    the value as it is; other `${...}` (a shell variable in a command) are left alone."""
    declared = data.get("parameters")
    if not isinstance(declared, dict) or not declared:
        return data
    values = dict(declared)
    for name, raw in overrides.items():
        if name in values:
            values[name] = yaml.safe_load(raw) if raw.strip() else raw

    def walk(value: object) -> object:
        if isinstance(value, str):
            whole = _REFERENCE.fullmatch(value)
            if whole and whole.group(1) in values:
                return values[whole.group(1)]
            return _REFERENCE.sub(
                lambda m: _text(values[m.group(1)]) if m.group(1) in values else m.group(0),
                value,
            )
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return {k: (v if k == "parameters" else walk(v)) for k, v in data.items()}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def write(document: ExperimentDoc) -> str:
    """YAML text for a document, leaving out everything not set."""
    data = _readable_order(
        document.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    )
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)


_FIRST_KEYS = ("name", "at", "object", "verb", "args", "type", "node", "members")


def _readable_order(value):  # type: ignore[no-untyped-def]
    """Names and times first in every mapping, the rest as the model orders them."""
    if isinstance(value, dict):
        keys = [k for k in _FIRST_KEYS if k in value] + [k for k in value if k not in _FIRST_KEYS]
        return {k: _readable_order(value[k]) for k in keys}
    if isinstance(value, list):
        return [_readable_order(v) for v in value]
    return value


def load_file(path: Path) -> tuple[ExperimentDoc, dict[str, Location], str]:
    text = path.read_text(encoding="utf-8")
    document, locations = read(text, path.name)
    return document, locations, text
