"""Reading the store without SQLAlchemy, for the commands that only look (list, show,
status, exec): the standard library's sqlite3 opens a SQLite store that is at the current
schema in milliseconds, where loading SQLAlchemy takes a quarter of a second or more.

Anything else — a PostgreSQL URL, a database still to create or migrate, and every write —
goes through ``Store``; ``open_for_reading`` picks.
"""

from __future__ import annotations

import builtins
import sqlite3
import urllib.parse
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from nestbed.errors import UserError
from nestbed.store.migrate import HEAD, VERSION_TABLE
from nestbed.store.paths import sqlite_file
from nestbed.store.records import ExperimentRecord, RunRecord, StateChange
from nestbed.store.states import State

_BUSY_TIMEOUT_S = 30.0
_EXPERIMENT = ("id, name, source_text, source_format, source_file, source_sha256, ir_json, "
               "ir_sha256, state, created_at, updated_at, state_changed_at, error")  # fmt: skip


class Reader:
    """A read-only view of a SQLite store at the current schema (what ``Store`` reads)."""

    _MODE = "ro"  # sqlite3's open mode (the writer's is "rw")

    def __init__(self, connection: sqlite3.Connection, path: str = ""):
        self._conn, self._path = connection, path

    @classmethod
    def open(cls, explicit: str | None = None) -> Self | None:
        """The reader of the store ``explicit`` names (else $NESTBED_DB, else the default),
        or None when only ``Store`` can open it (a URL, a missing file, an older schema)."""
        path = sqlite_file(explicit)
        if path is None or not path.is_file():
            return None
        uri = f"file:{urllib.parse.quote(str(path))}?mode={cls._MODE}"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
            stamp = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()
        except sqlite3.Error:
            return None
        if stamp != [(HEAD,)]:
            conn.close()
            return None
        return cls(conn, str(path))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def find(self, name: str) -> ExperimentRecord | None:
        row = self._conn.execute(
            f"SELECT {_EXPERIMENT} FROM experiments WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else _experiment(row)

    def get(self, name: str) -> ExperimentRecord:
        record = self.find(name)
        if record is None:
            raise UserError(
                f"there is no experiment named {name!r}; see the experiments with `nestbed list`"
            )
        return record

    def list(self) -> builtins.list[ExperimentRecord]:
        rows = self._conn.execute(f"SELECT {_EXPERIMENT} FROM experiments").fetchall()
        return sorted((_experiment(row) for row in rows), key=lambda r: r.name)

    def history(self, name: str) -> builtins.list[StateChange]:
        rows = self._of(name, "id, experiment_name, from_state, to_state, at, reason",
                        "state_changes")  # fmt: skip
        return [
            StateChange(id=i, experiment=who, from_state=None if was is None else State(was),
                        to_state=State(now), at=_time(at), reason=why)
            for i, who, was, now, at, why in rows
        ]  # fmt: skip

    def runs(self, name: str, *, open_only: bool = False) -> builtins.list[RunRecord]:
        rows = self._of(name, "id, started_at, ended_at, outcome, results_dir", "runs",
                        "ended_at IS NULL" if open_only else None)  # fmt: skip
        return [
            RunRecord(id=i, experiment=name, started_at=_time(started), ended_at=_time(ended),
                      outcome=outcome, results_dir=folder)
            for i, started, ended, outcome, folder in rows
        ]  # fmt: skip

    def _of(
        self, name: str, columns: str, table: str, also: str | None = None
    ) -> builtins.list[tuple[Any, ...]]:
        """The experiment's rows of ``table`` (that meet ``also``, a fixed condition of the
        caller's), oldest first; UserError for no experiment."""
        experiment = self.get(name)
        where = "experiment_id = ?" + (f" AND {also}" if also else "")
        query = f"SELECT {columns} FROM {table} WHERE {where} ORDER BY id"
        return self._conn.execute(query, (experiment.id,)).fetchall()


def _time(value: Any) -> Any:
    """A stored timestamp (UTC, as SQLAlchemy writes it to SQLite) as an aware datetime."""
    if value is None:
        return None
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def _experiment(row: tuple[Any, ...]) -> ExperimentRecord:
    (id_, name, text, fmt, file, source_sha, ir, ir_sha, state, created, updated, changed,
     error) = row  # fmt: skip
    return ExperimentRecord(
        id=id_, name=name, source_text=text, source_format=fmt, source_file=file,
        source_sha256=source_sha, ir_json=ir, ir_sha256=ir_sha, state=State(state),
        created_at=_time(created), updated_at=_time(updated), state_changed_at=_time(changed),
        error=error,
    )  # fmt: skip


def open_for_reading(explicit: str | None = None) -> Any:
    """A reader of the store when it can be read without SQLAlchemy, else the ``Store``."""
    reader = Reader.open(explicit)
    if reader is not None:
        return reader
    from nestbed.store.experiments import Store

    return Store.open(explicit)
