"""A block of store work cut short by a signal (``KeyboardInterrupt`` or ``Interrupted``) lets
go of the SQLite file, even while the exception, and with it the block's frames, is kept: a
run keeps its interrupt until it has swapped out, and the signals module keeps the last one
for good. Before, a read cut between its query and its rows held its shared lock, and every
later commit of the process failed with "database is locked" (a sweep stopped in a point
could not swap it out)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from nestbed.errors import EnvironmentProblem
from nestbed.store import State, Store, db

KEPT: list[BaseException] = []


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    # A failing commit waits this long, not 30 s, before it says "database is locked".
    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_S", 0.3)
    opened = Store.open(str(tmp_path / "nestbed.db"))
    opened.create_experiment("a", source_text="", source_format="ns", source_file=None,
                             ir_json="{}")  # fmt: skip
    # Two connections in the pool, so that the next write is not on the one the read used.
    with opened._engine.connect(), opened._engine.connect():
        pass
    yield opened
    KEPT.clear()
    opened.close()


def write(store: Store) -> None:
    store.create_experiment("b", source_text="", source_format="ns", source_file=None,
                            ir_json="{}")  # fmt: skip


def test_a_read_cut_between_its_query_and_its_rows_lets_go_of_the_file(store: Store) -> None:
    try:
        with store.reading() as conn:
            result = conn.execute(sa.text("SELECT name FROM experiments UNION SELECT 'x'"))
            result.fetchone()
            raise KeyboardInterrupt  # a signal, before the rest of the rows were read
    except KeyboardInterrupt as exc:
        KEPT.append(exc)  # its traceback keeps ``result``, and its cursor, alive
    write(store)
    assert store.get("b").name == "b"


def test_a_write_cut_in_its_statement_lets_go_of_the_file(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect = store._engine.dialect
    executed = dialect.do_execute

    def interrupted(cursor, statement, parameters, context=None):  # type: ignore[no-untyped-def]
        executed(cursor, statement, parameters, context)
        if statement.lstrip().upper().startswith("SELECT"):
            raise KeyboardInterrupt  # the signal lands as the statement returns

    monkeypatch.setattr(dialect, "do_execute", interrupted)
    try:
        store.transition("a", State.SWAPPING_IN, expect_from=State.DEFINED)
    except KeyboardInterrupt as exc:
        KEPT.append(exc)
    monkeypatch.setattr(dialect, "do_execute", executed)
    write(store)
    assert store.get("b").name == "b"


def test_a_lock_held_elsewhere_still_says_database_is_locked(store: Store) -> None:
    """The busy timeout is real in these tests: a connection that truly holds the file makes
    the write fail as the user would see it."""
    holder = store._engine.raw_connection()
    try:
        holder.cursor().execute("BEGIN IMMEDIATE")
        with pytest.raises(EnvironmentProblem, match="database is locked"):
            write(store)
    finally:
        holder.rollback()
        holder.close()
