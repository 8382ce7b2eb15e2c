"""Gathering problems found while reading an experiment file, each at its file:line."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from nestbed.errors import Problem, SpecError

Location = tuple[str, int | None]


def path_key(path: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in path)


class Problems:
    """Collects errors and warnings; ``locate`` finds the closest known place of a path."""

    def __init__(self, file: str, locations: Mapping[str, Location] | None = None):
        self.file = file
        self.locations = dict(locations or {})
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []

    def locate(self, path: tuple[str | int, ...]) -> Location:
        for end in range(len(path), 0, -1):
            found = self.locations.get(path_key(path[:end]))
            if found:
                return found
        return (self.file, None)

    def error(self, path: tuple[str | int, ...], message: str) -> None:
        file, line = self.locate(path)
        self.errors.append(Problem(message, file, line))

    def warn(self, path: tuple[str | int, ...], message: str) -> None:
        file, line = self.locate(path)
        self.warnings.append(Problem(message, file, line))

    def raise_if_any(self) -> None:
        if self.errors:
            raise SpecError(_unique(self.errors))


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: set[Problem] = set()
    return [p for p in problems if not (p in seen or seen.add(p))]


def describe_validation_error(exc: ValidationError, problems: Problems) -> None:
    """Turns each pydantic error into one located sentence."""
    for err in exc.errors():
        loc = tuple(err["loc"])
        # Union members add their type name to the path; they are noise for a user.
        loc = tuple(p for p in loc if not (isinstance(p, str) and p[:1].islower() and "[" in p))
        field = path_key(loc) or "the file"
        kind = err["type"]
        if kind == "extra_forbidden":
            message = (
                f"unknown key '{loc[-1]}' in {path_key(loc[:-1]) or 'the file'}; "
                "remove it or check its spelling"
            )
        elif kind == "missing":
            message = f"{field} is missing; add it"
        else:
            got = err.get("input")
            shown = f" (got {got!r})" if not isinstance(got, dict | list) else ""
            message = f"{field}: {err['msg'][0].lower()}{err['msg'][1:]}{shown}"
        problems.error(loc, message)
