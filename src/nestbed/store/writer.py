"""The life cycle's writes to a SQLite store with the standard library's sqlite3: what
swapin, swapout, run and cleanup change (states, runs, definitions) without loading
SQLAlchemy, which takes a third of a second or more of each of those commands.

The same rows and the same rules as ``Store``: every method is one ``BEGIN IMMEDIATE``
transaction (the write lock taken at its start, so two writers are serialized, never both
refused), state changes compare-and-set the state as ``Store.transition`` does, timestamps
are written as SQLAlchemy writes them (UTC, ``YYYY-MM-DD HH:MM:SS.ffffff``), and every
message is ``store.definitions``'. A PostgreSQL store, or one to create or migrate, goes
through ``Store``: ``open_for_writing`` picks.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from nestbed.errors import EnvironmentProblem
from nestbed.store import definitions as rules
from nestbed.store.reader import _EXPERIMENT, Reader, _experiment, _time
from nestbed.store.records import ExperimentRecord, RunRecord
from nestbed.store.states import DELETABLE, EDITABLE, State, check_transition


def _stamp(at: datetime) -> str:
    """A timestamp as SQLAlchemy stores one in SQLite (UTC, naive, microseconds always)."""
    return at.astimezone(UTC).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")


class Writer(Reader):
    """A SQLite store at the current schema, read and written with sqlite3."""

    _MODE = "rw"

    def __init__(self, connection: sqlite3.Connection, path: str = ""):
        super().__init__(connection, path)
        connection.isolation_level = None  # transactions are begun here, not by the driver
        connection.execute("PRAGMA foreign_keys = ON")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise _unreachable(self._path, exc) from exc
            yield conn
        except BaseException:
            # Also when a signal cut in just after BEGIN: an open transaction would refuse
            # the next one (a swap-out after the interrupt) on this connection.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            raise _unreachable(self._path, exc) from exc

    def _lock(self, conn: sqlite3.Connection, name: str) -> tuple[Any, ...]:
        """The experiment's row, inside the transaction (which holds the write lock)."""
        row = conn.execute(
            f"SELECT {_EXPERIMENT} FROM experiments WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise rules.missing(name)
        return row

    # -- experiments -----------------------------------------------------------------------

    def create_experiment(
        self,
        name: str,
        *,
        source_text: str,
        source_format: str,
        source_file: str | None,
        ir_json: str,
    ) -> ExperimentRecord:
        """Store a new experiment in state ``defined``; its name must not be taken."""
        rules.check_name(name)
        definition = rules.definition(source_text, source_format, source_file, ir_json)
        now = rules.utc_now()
        try:
            with self._transaction() as conn:
                columns = {**definition, "name": name, "state": State.DEFINED.value,
                           "created_at": _stamp(now), "updated_at": _stamp(now),
                           "state_changed_at": _stamp(now), "error": None}  # fmt: skip
                cursor = conn.execute(
                    f"INSERT INTO experiments ({', '.join(columns)}) "
                    f"VALUES ({', '.join('?' * len(columns))})",
                    tuple(columns.values()),
                )
                _record_change(conn, cursor.lastrowid, name, None, State.DEFINED, now, "created")
                return _experiment(self._lock(conn, name))
        except sqlite3.IntegrityError as exc:
            if self.find(name) is not None:
                raise rules.taken(name) from exc
            raise

    def update_ir(
        self,
        name: str,
        *,
        source_text: str,
        source_format: str,
        source_file: str | None,
        ir_json: str,
    ) -> ExperimentRecord:
        """Replace an experiment's source and IR; refused while it is (being) swapped in."""
        definition = rules.definition(source_text, source_format, source_file, ir_json)
        with self._transaction() as conn:
            record = _experiment(self._lock(conn, name))
            if record.state not in EDITABLE:
                raise rules.not_editable(name, record.state)
            columns = {**definition, "updated_at": _stamp(rules.utc_now())}
            conn.execute(
                f"UPDATE experiments SET {', '.join(f'{c} = ?' for c in columns)} WHERE id = ?",
                (*columns.values(), record.id),
            )
            return _experiment(self._lock(conn, name))

    def delete(self, name: str) -> None:
        """Delete an experiment with its history and runs; only when nothing of it is running."""
        with self._transaction() as conn:
            record = _experiment(self._lock(conn, name))
            if record.state not in DELETABLE:
                raise rules.not_deletable(name, record.state)
            for table, column in (("state_changes", "experiment_id"),
                                  ("runs", "experiment_id"), ("experiments", "id")):  # fmt: skip
                conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (record.id,))

    # -- life cycle ------------------------------------------------------------------------

    def transition(
        self,
        name: str,
        to: State,
        expect_from: State | None = None,
        reason: str | None = None,
    ) -> ExperimentRecord:
        """As ``Store.transition``: a compare-and-set of the state, recorded with ``reason``."""
        to = rules.state(to)
        expect_from = None if expect_from is None else rules.state(expect_from)
        now = rules.utc_now()
        with self._transaction() as conn:
            record = _experiment(self._lock(conn, name))
            current = record.state
            check_transition(name, current, to, expect_from)
            values: dict[str, Any] = {"state": to.value, "updated_at": _stamp(now),
                                      "state_changed_at": _stamp(now)}  # fmt: skip
            if to is State.FAILED:
                values["error"] = reason
            elif to is State.SWAPPING_IN:
                values["error"] = None
            cursor = conn.execute(
                f"UPDATE experiments SET {', '.join(f'{c} = ?' for c in values)} "
                "WHERE id = ? AND state = ?",
                (*values.values(), record.id, current.value),
            )
            if cursor.rowcount != 1:
                raise rules.changed_meanwhile(name, to)
            _record_change(conn, record.id, name, current, to, now, reason)
            return _experiment(self._lock(conn, name))

    # -- runs ------------------------------------------------------------------------------

    def start_run(self, name: str, results_dir: str | os.PathLike[str]) -> int:
        """Record that a run of an experiment started, writing to ``results_dir``; its id."""
        with self._transaction() as conn:
            record = _experiment(self._lock(conn, name))
            cursor = conn.execute(
                "INSERT INTO runs (experiment_id, started_at, ended_at, outcome, results_dir) "
                "VALUES (?, ?, NULL, NULL, ?)",
                (record.id, _stamp(rules.utc_now()), os.fspath(results_dir)),
            )
            run_id = cursor.lastrowid
        assert isinstance(run_id, int)
        return run_id

    def end_run(self, run_id: int, outcome: str) -> RunRecord:
        """Record that run ``run_id`` ended with ``outcome``; a run ends only once."""
        if not outcome:
            raise rules.empty_outcome(run_id)
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE runs SET ended_at = ?, outcome = ? WHERE id = ? AND ended_at IS NULL",
                (_stamp(rules.utc_now()), outcome, run_id),
            )
            row = conn.execute(
                "SELECT runs.id, experiments.name, started_at, ended_at, outcome, results_dir "
                "FROM runs JOIN experiments ON runs.experiment_id = experiments.id "
                "WHERE runs.id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                raise rules.not_a_run(run_id)
            i, name, started, ended, said, folder = row
            run = RunRecord(id=i, experiment=name, started_at=_time(started),
                            ended_at=_time(ended), outcome=said, results_dir=folder)  # fmt: skip
            if cursor.rowcount != 1:
                raise rules.ended_twice(run_id, name, run.ended_at, run.outcome)  # type: ignore[arg-type]
        return run


def _record_change(
    conn: sqlite3.Connection,
    experiment_id: Any,
    name: str,
    from_state: State | None,
    to_state: State,
    at: datetime,
    reason: str | None,
) -> None:
    conn.execute(
        "INSERT INTO state_changes (experiment_id, experiment_name, from_state, to_state, at, "
        "reason) VALUES (?, ?, ?, ?, ?, ?)",
        (experiment_id, name, None if from_state is None else from_state.value, to_state.value,
         _stamp(at), reason),
    )  # fmt: skip


def _unreachable(path: str, exc: sqlite3.Error) -> EnvironmentProblem:
    """As ``db.unreachable`` says it for a SQLite store."""
    reason = str(exc).strip().splitlines()
    detail = reason[0] if reason else type(exc).__name__
    return EnvironmentProblem(
        f"cannot open the nestbed database sqlite:///{path} ({detail}); check that its "
        "directory exists and is writable, or set NESTBED_DB or --db"
    )


def open_for_writing(explicit: str | None = None) -> Any:
    """A writer of the store when it is SQLite at the current schema, else the ``Store``."""
    writer = Writer.open(explicit)
    if writer is not None:
        return writer
    from nestbed.store.experiments import Store

    return Store.open(explicit)
