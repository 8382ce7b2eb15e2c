"""The requests an experiment's controller answers on its socket, one frozen model per op.

A request line is parsed once, here, into one of these; an unknown op, a missing field, an
unknown field or a value of the wrong kind is ``Refused`` with one sentence naming it, so the
code that carries a request out never meets a malformed one.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError

from nestbed.errors import Refused
from nestbed.model.base import Frozen
from nestbed.model.options import ControllerStart


def _words(value: Any) -> Any:
    # Event arguments are words of an ns-2 command: `$cbr set rate_ 1Mb` as much as `... 5`.
    if isinstance(value, list | tuple):
        return tuple(str(a) if isinstance(a, int | float) else a for a in value)
    return value


class Ping(Frozen):
    """Are you there? (The reply carries the run's t0 on the host's monotonic clock.)"""

    op: Literal["ping"]


class Status(Frozen):
    """The run now: elapsed time, pending events, links, programs, flows, linktests, and
    the pipes' counters: every pipe's, or only those of ``links``, or only the ``top`` that
    matter most (a link that is down, then drops, then the most bytes out in the last
    second), so that a page showing a few of thousands has only those serialised."""

    op: Literal["status"]
    links: tuple[str, ...] | None = None
    top: Annotated[int, Field(ge=1)] | None = None


class Event(Frozen):
    """An action now (``after_s`` 0: the reply has its events.csv row) or later."""

    op: Literal["event"]
    object: str
    verb: str
    args: Annotated[tuple[str, ...], BeforeValidator(_words)] = ()
    after_s: float = 0


class Finish(Frozen):
    """Ends the run: stops programs and traffic, writes every table and the report."""

    op: Literal["finish"]
    outcome: str = "completed"
    reason: str | None = None


class NextRun(Frozen):
    """Starts another run on the same network (a sweep's link-reuse mode), with its own
    options, once the current one has finished."""

    op: Literal["next_run"]
    start: ControllerStart


class Shutdown(Frozen):
    """The controller process exits after its reply."""

    op: Literal["shutdown"]


Request = Ping | Status | Event | Finish | NextRun | Shutdown
OPS = ("ping", "status", "event", "finish", "next_run", "shutdown")
_ADAPTER: TypeAdapter[Request] = TypeAdapter(
    Annotated[Request, Field(discriminator="op")]  # type: ignore[arg-type]
)


def parse(line: str | bytes) -> Request:
    """The request on one line of the socket; Refused with the first problem in it."""
    try:
        data = json.loads(line)
    except ValueError:
        raise Refused("the controller got a request that is not one JSON object") from None
    if not isinstance(data, dict):
        raise Refused("the controller got a request that is not one JSON object")
    op = data.get("op")
    if op not in OPS:
        raise Refused(f"the controller has no request {op!r}; use {', '.join(OPS)}")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise Refused(_sentence(str(op), exc)) from None


def _sentence(op: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"][1:])  # [0] is the op's model
    if first["type"] == "missing":
        return f"request {op} lacks its field {where!r}"
    if first["type"] == "extra_forbidden":
        return f"request {op} has no field {where!r}"
    return f"request {op}: field {where!r}: {first['msg']}"
