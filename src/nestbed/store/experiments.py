"""The experiment store: create, find, change and delete experiments, and record their runs.

``Store`` is the one class the rest of nestbed talks to. Every method runs in its own
transaction; state changes lock the experiment's row (``SELECT … FOR UPDATE`` on PostgreSQL,
``BEGIN IMMEDIATE`` on SQLite) and then compare-and-set the state (``UPDATE … WHERE state =
:from``), so of two processes racing to swap the same experiment in, exactly one wins.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from nestbed.errors import EnvironmentProblem, InternalError
from nestbed.store import definitions as rules
from nestbed.store import migrate
from nestbed.store.db import READ_ONLY, connect, let_go, redact, resolve_db_url, unreachable
from nestbed.store.definitions import sha256_hex, utc_now
from nestbed.store.records import ExperimentRecord, RunRecord, StateChange
from nestbed.store.schema import experiments, runs, state_changes
from nestbed.store.states import DELETABLE, EDITABLE, State, check_transition

__all__ = ["Store", "experiment_record", "insert_experiment", "sha256_hex", "utc_now"]


class Store:
    """A connection to the experiment store; open it with ``Store.open`` and close it after use."""

    def __init__(self, engine: Engine, url: str) -> None:
        """Wrap an engine whose database is already migrated; most callers want ``open``."""
        self._engine = engine
        self._url = url
        sqlite = engine.dialect.name == "sqlite"
        self._writers: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if sqlite else contextlib.nullcontext()
        )

    @classmethod
    def open(cls, url_or_path: str | None = None) -> Self:
        """Open the store (see ``resolve_db_url``) and run any pending schema migrations (alembic
        is loaded only when the database is not at ``migrate.HEAD``)."""
        url = resolve_db_url(url_or_path)
        engine = connect(url)
        if migrate.is_current(engine):
            return cls(engine, url)
        from alembic.util import CommandError

        try:
            migrate.upgrade(engine)
        except CommandError as exc:
            engine.dispose()
            raise EnvironmentProblem(
                f"the nestbed database {redact(url)} has a schema this nestbed does not know "
                f"({exc}); upgrade nestbed or set NESTBED_DB or --db to another database"
            ) from exc
        except sa.exc.DBAPIError as exc:
            engine.dispose()
            raise unreachable(url, exc) from exc
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, url)

    @property
    def url(self) -> str:
        """The database URL, with any password hidden."""
        return redact(self._url)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for tests and maintenance tools."""
        return self._engine

    def close(self) -> None:
        """Close every connection to the database."""
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
        fields = dict(source_text=source_text, source_format=source_format,
                      source_file=source_file, ir_json=ir_json)  # fmt: skip
        try:
            with self._transaction() as conn:
                return insert_experiment(conn, name, **fields)
        except sa.exc.IntegrityError as exc:
            if self.find(name) is not None:
                raise rules.taken(name) from exc
            raise

    def find(self, name: str) -> ExperimentRecord | None:
        """The experiment called ``name``, or None if there is none."""
        with self._transaction(read_only=True) as conn:
            row = conn.execute(experiments.select().where(experiments.c.name == name)).first()
        return None if row is None else experiment_record(row)

    def get(self, name: str) -> ExperimentRecord:
        """The experiment called ``name``; ``UserError`` if there is none."""
        record = self.find(name)
        if record is None:
            raise rules.missing(name)
        return record

    def list(self) -> builtins.list[ExperimentRecord]:
        """Every stored experiment, ordered by name."""
        with self._transaction(read_only=True) as conn:
            rows = conn.execute(experiments.select()).all()
        return sorted((experiment_record(row) for row in rows), key=lambda r: r.name)

    def delete(self, name: str) -> None:
        """Delete an experiment with its history and runs; only when nothing of it is running."""
        with self._transaction() as conn:
            row = _lock(conn, name)
            state = State(row.state)
            if state not in DELETABLE:
                raise rules.not_deletable(name, state)
            conn.execute(state_changes.delete().where(state_changes.c.experiment_id == row.id))
            conn.execute(runs.delete().where(runs.c.experiment_id == row.id))
            conn.execute(experiments.delete().where(experiments.c.id == row.id))

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
            row = _lock(conn, name)
            state = State(row.state)
            if state not in EDITABLE:
                raise rules.not_editable(name, state)
            conn.execute(
                experiments.update()
                .where(experiments.c.id == row.id)
                .values(updated_at=utc_now(), **definition)
            )
            return experiment_record(_lock(conn, name))

    # -- life cycle ------------------------------------------------------------------------

    def transition(
        self,
        name: str,
        to: State,
        expect_from: State | None = None,
        reason: str | None = None,
    ) -> ExperimentRecord:
        """Move an experiment to state ``to``, recording why; ``UserError`` if not allowed.

        With ``expect_from``, the move happens only if the experiment is in that state now.
        Becoming ``failed`` stores ``reason`` as the experiment's error; swapping in clears it.
        """
        to = rules.state(to)
        expect_from = None if expect_from is None else rules.state(expect_from)
        now = utc_now()
        with self._transaction() as conn:
            row = _lock(conn, name)
            current = State(row.state)
            check_transition(name, current, to, expect_from)
            values: dict[str, Any] = {
                "state": to.value,
                "updated_at": now,
                "state_changed_at": now,
            }
            if to is State.FAILED:
                values["error"] = reason
            elif to is State.SWAPPING_IN:
                values["error"] = None
            result = conn.execute(
                experiments.update()
                .where(experiments.c.id == row.id, experiments.c.state == current.value)
                .values(**values)
            )
            if result.rowcount != 1:
                raise rules.changed_meanwhile(name, to)
            _record_change(conn, row.id, name, current, to, now, reason)
            return experiment_record(_lock(conn, name))

    def history(self, name: str) -> builtins.list[StateChange]:
        """Every state change of an experiment, oldest first, starting with its creation."""
        with self._transaction() as conn:
            row = _lock(conn, name)
            rows = conn.execute(
                state_changes.select()
                .where(state_changes.c.experiment_id == row.id)
                .order_by(state_changes.c.id)
            ).all()
        return [
            StateChange(
                id=r.id,
                experiment=r.experiment_name,
                from_state=None if r.from_state is None else State(r.from_state),
                to_state=State(r.to_state),
                at=r.at,
                reason=r.reason,
            )
            for r in rows
        ]

    # -- runs ------------------------------------------------------------------------------

    def start_run(self, name: str, results_dir: str | os.PathLike[str]) -> int:
        """Record that a run of an experiment started, writing to ``results_dir``; its id."""
        with self._transaction() as conn:
            row = _lock(conn, name)
            result = conn.execute(
                runs.insert().values(
                    experiment_id=row.id,
                    started_at=utc_now(),
                    ended_at=None,
                    outcome=None,
                    results_dir=os.fspath(results_dir),
                )
            )
            (run_id,) = result.inserted_primary_key or (None,)
        if not isinstance(run_id, int):
            raise InternalError(f"the database gave run id {run_id!r}, not an integer")
        return run_id

    def end_run(self, run_id: int, outcome: str) -> RunRecord:
        """Record that run ``run_id`` ended with ``outcome``; a run ends only once."""
        if not outcome:
            raise rules.empty_outcome(run_id)
        with self._transaction() as conn:
            result = conn.execute(
                runs.update()
                .where(runs.c.id == run_id, runs.c.ended_at.is_(None))
                .values(ended_at=utc_now(), outcome=outcome)
            )
            run = _run(conn, runs.c.id == run_id).first()
            if run is None:
                raise rules.not_a_run(run_id)
            if result.rowcount != 1:
                raise rules.ended_twice(run_id, run.name, run.ended_at, run.outcome)
        return _run_record(run)

    def runs(self, name: str, *, open_only: bool = False) -> builtins.list[RunRecord]:
        """Every run of an experiment, oldest first; with ``open_only`` those not ended (a
        swap-in's own, read at every command: an experiment's thousandth run costs what its
        first did)."""
        with self._transaction(read_only=True) as conn:
            row = _lock(conn, name)
            where = runs.c.experiment_id == row.id
            if open_only:
                where = where & runs.c.ended_at.is_(None)
            rows = _run(conn, where).all()
        return [_run_record(r) for r in rows]

    # -- plumbing --------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction on the store, for its other modules (``accounts``); database
        errors become ``EnvironmentProblem`` naming the store."""
        with self._transaction() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A transaction that only reads: on SQLite it takes no write lock (``db``)."""
        with self._transaction(read_only=True) as conn:
            yield conn

    @contextmanager
    def _transaction(self, *, read_only: bool = False) -> Iterator[Connection]:
        # This process's writers to a SQLite file queue here, where the lock passes at once
        # to the next, rather than in SQLite's busy handler, which polls with sleeps of up
        # to 100 ms; another process's writer is still waited for by SQLite.
        writing = self._writers if not read_only else contextlib.nullcontext()
        try:
            with writing, self._engine.connect() as conn:
                if read_only:
                    conn.execution_options(**{READ_ONLY: True})
                try:
                    with conn.begin():
                        yield conn
                except BaseException:
                    let_go(conn)
                    raise
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            raise unreachable(self._url, exc) from exc


def insert_experiment(
    conn: Connection,
    name: str,
    *,
    source_text: str,
    source_format: str,
    source_file: str | None,
    ir_json: str,
) -> ExperimentRecord:
    """Insert a new experiment in state ``defined`` within the transaction of ``conn``
    (``IntegrityError`` if its name is taken)."""
    rules.check_name(name)
    definition = rules.definition(source_text, source_format, source_file, ir_json)
    now = utc_now()
    result = conn.execute(
        experiments.insert().values(
            name=name,
            state=State.DEFINED.value,
            created_at=now,
            updated_at=now,
            state_changed_at=now,
            error=None,
            **definition,
        )
    )
    (experiment_id,) = result.inserted_primary_key or (None,)
    _record_change(conn, experiment_id, name, None, State.DEFINED, now, "created")
    return experiment_record(_lock(conn, name))


def _lock(conn: Connection, name: str) -> sa.Row[Any]:
    """The experiment's row, locked until the transaction ends; ``UserError`` if there is none."""
    row = conn.execute(
        experiments.select().where(experiments.c.name == name).with_for_update()
    ).first()
    if row is None:
        raise rules.missing(name)
    return row


def _record_change(
    conn: Connection,
    experiment_id: Any,
    name: str,
    from_state: State | None,
    to_state: State,
    at: datetime,
    reason: str | None,
) -> None:
    conn.execute(
        state_changes.insert().values(
            experiment_id=experiment_id,
            experiment_name=name,
            from_state=None if from_state is None else from_state.value,
            to_state=to_state.value,
            at=at,
            reason=reason,
        )
    )


def experiment_record(row: sa.Row[Any]) -> ExperimentRecord:
    values = dict(row._mapping)
    values["state"] = State(values["state"])
    return ExperimentRecord(**values)


def _run(conn: Connection, where: sa.ColumnElement[bool]) -> sa.CursorResult[Any]:
    query = (
        sa.select(runs, experiments.c.name)
        .join(experiments, runs.c.experiment_id == experiments.c.id)
        .where(where)
        .order_by(runs.c.id)
    )
    return conn.execute(query)


def _run_record(row: sa.Row[Any]) -> RunRecord:
    return RunRecord(
        id=row.id,
        experiment=row.name,
        started_at=row.started_at,
        ended_at=row.ended_at,
        outcome=row.outcome,
        results_dir=row.results_dir,
    )
