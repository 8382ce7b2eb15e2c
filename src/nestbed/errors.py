"""The one exception tree of nestbed, and the exit code of each branch.

    NestbedError                 anything nestbed reports to a user
    ├── UserError         (2)    a bad file, a bad parameter, a wrong name: the user can fix it
    │   ├── SpecError            one or more problems found in an experiment file
    │   └── Refused              a request the experiment's controller turns down
    ├── EnvironmentProblem (3)   a missing tool, no root, a database that cannot be reached
    │   └── Held                 what an experiment needs is held by other experiments for now
    └── InternalError     (4)    a broken invariant inside nestbed: a bug to report

The CLI catches only ``NestbedError``: it prints the message (one sentence per problem) and
exits with the branch's code. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class NestbedError(Exception):
    """Base of every error nestbed reports to its user."""

    exit_code = 1


class UserError(NestbedError):
    """A mistake the user can fix: a bad file, parameter or name."""

    exit_code = 2


class Refused(UserError):
    """A request or event the experiment's controller turns down (an unknown object, a
    program already running, a run that has ended): the user's to fix, not a bug."""


class EnvironmentProblem(NestbedError):
    """Something missing or wrong on the machine: a tool, a permission, a server."""

    exit_code = 3


class Held(EnvironmentProblem):
    """The experiment would fit, but other experiments hold what it needs (a cluster's node
    slots) for now: it can swap in once one of them ends. A sweep's point waits for its own
    other points to end, rather than failing."""


class InternalError(NestbedError):
    """A broken invariant inside nestbed; a bug."""

    exit_code = 4


def reason(exc: BaseException) -> str:
    """A failure as a sentence: nestbed's own as it is, anything else with its type (a
    timeout says nothing by its message alone)."""
    return str(exc) if isinstance(exc, NestbedError) else f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in an experiment file: where it is and one sentence saying what to do."""

    message: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}: {self.message}"
        if self.file:
            return f"{self.file}: {self.message}"
        return self.message


class SpecError(UserError):
    """Every problem found in an experiment file, gathered before failing."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
