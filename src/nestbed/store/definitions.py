"""What the store checks of an experiment it is given, shared by ``Store`` (SQLAlchemy) and
the standard library's path (``store.writer``): names, source formats, the definition's
columns, timestamps, and the one sentence for an experiment that does not exist. No I/O and
no database library."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from nestbed.errors import InternalError, UserError
from nestbed.store.states import State, what_to_do

SOURCE_FORMATS: tuple[str, ...] = ("ns", "yaml", "python")
"""The languages an experiment's source may be written in."""

NAME_PATTERN = r"[-0-9A-Za-z]+"
"""What an experiment name may contain (names become parts of host names)."""

_NAME = re.compile(NAME_PATTERN)


def utc_now() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def sha256_hex(text: str) -> str:
    """The SHA-256 of ``text`` encoded as UTF-8, in hexadecimal."""
    import hashlib  # here: the commands that only read the store do without OpenSSL's

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise UserError(
            f"experiment name {name!r} is not valid; use only letters, digits and '-' "
            "(names become parts of host names)"
        )


def definition(
    source_text: str, source_format: str, source_file: str | None, ir_json: str
) -> dict[str, Any]:
    """The definition's columns (with their hashes); InternalError for a caller's bug."""
    if source_format not in SOURCE_FORMATS:
        raise InternalError(
            f"source format {source_format!r} is not one of {', '.join(SOURCE_FORMATS)}; "
            "this is a bug in the caller"
        )
    import json

    try:
        json.loads(ir_json)
    except ValueError as exc:
        raise InternalError(f"the IR to store is not valid JSON ({exc}); this is a bug") from exc
    return {
        "source_text": source_text,
        "source_format": source_format,
        "source_file": source_file,
        "source_sha256": sha256_hex(source_text),
        "ir_json": ir_json,
        "ir_sha256": sha256_hex(ir_json),
    }


def state(value: State | str) -> State:
    try:
        return State(value)
    except ValueError as exc:
        raise InternalError(
            f"{value!r} is not an experiment state (one of {', '.join(State)}); this is a bug"
        ) from exc


def missing(name: str) -> UserError:
    return UserError(
        f"there is no experiment named {name!r}; see the experiments with `nestbed list`"
    )


def taken(name: str) -> UserError:
    return UserError(
        f"an experiment named {name!r} already exists; delete it with "
        f"`nestbed delete {name}` or choose another name with --name"
    )


def changed_meanwhile(name: str, to: State) -> UserError:
    return UserError(
        f"experiment {name!r} changed state while it was being moved to {to}; "
        f"check it with `nestbed show {name}` and try again"
    )


def not_a_run(run_id: int) -> UserError:
    return UserError(
        f"there is no run with id {run_id}; see an experiment's runs with `nestbed show NAME`"
    )


def ended_twice(run_id: int, name: str, ended_at: datetime, outcome: str | None) -> UserError:
    return UserError(
        f"run {run_id} of experiment {name!r} already ended at {ended_at.isoformat()} with "
        f"outcome {outcome!r}; start a new run instead"
    )


def empty_outcome(run_id: int) -> InternalError:
    return InternalError(f"run {run_id} was ended with an empty outcome; this is a bug")


def not_deletable(name: str, current: State) -> UserError:
    return UserError(
        f"experiment {name!r} is {current} and cannot be deleted; {what_to_do(name, current)}"
    )


def not_editable(name: str, current: State) -> UserError:
    return UserError(
        f"experiment {name!r} is {current}, so its definition cannot be changed; "
        f"{what_to_do(name, current)}"
    )
