"""The life cycle's writes without SQLAlchemy (``store.writer``): the store's own tests of
experiments, transitions and runs, run again on a ``Writer``, and rows that ``Store`` reads
back exactly as it reads its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

# The same tests, collected here with this module's `store` fixture (a Writer).
from test_store_experiments import (  # noqa: F401
    test_create_then_get_returns_every_column,
    test_delete_is_allowed_only_when_nothing_runs,
    test_delete_of_active_experiment_is_refused,
    test_delete_removes_experiment_history_and_runs,
    test_delete_unknown_name_is_a_user_error,
    test_duplicate_name_is_refused_and_keeps_the_first,
    test_find_returns_none_for_unknown_name,
    test_invalid_names_are_refused,
    test_ir_that_is_not_json_is_a_bug,
    test_list_is_ordered_by_name,
    test_unknown_source_format_is_a_bug,
    test_update_ir_of_active_experiment_is_refused,
    test_update_ir_replaces_definition_and_hashes,
)
from test_store_runs import (  # noqa: F401
    experiment,
    test_a_run_ends_only_once,
    test_ending_an_unknown_run,
    test_runs_are_listed_oldest_first_and_per_experiment,
    test_runs_of_unknown_experiment,
    test_start_and_end_a_run,
)
from test_store_transitions import (  # noqa: F401
    new_experiment_in,
    test_every_pair_is_allowed_exactly_when_specified,
    test_expect_from_match_moves,
    test_expect_from_mismatch_is_refused_even_if_the_move_is_legal,
    test_failure_reason_is_kept_as_error_until_the_next_swapin,
    test_history_records_every_change_with_reason_in_order,
    test_illegal_transition_from_defined,
    test_illegal_transition_names_state_allowed_moves_and_fix,
    test_transition_of_unknown_experiment,
)

from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.store import State, Store, migrate
from nestbed.store import writer as writer_module
from nestbed.store.writer import Writer, open_for_writing


def _migrated(path: Path) -> Path:
    Store.open(str(path)).close()
    return path


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Writer]:
    """A writer of an empty SQLite store (created and migrated by ``Store``)."""
    writer = Writer.open(str(_migrated(tmp_path / "nestbed.db")))
    assert writer is not None
    with writer:
        yield writer


def test_the_store_reads_what_the_writer_wrote(store: Writer, tmp_path: Path) -> None:
    new_experiment_in(store, State.ACTIVE)
    run = store.start_run("dumbbell", tmp_path / "r1")
    store.end_run(run, "completed")
    store.start_run("dumbbell", tmp_path / "r2")
    store.transition("dumbbell", State.FAILED, reason="it broke")
    with Store.open(str(tmp_path / "nestbed.db")) as full:
        assert full.get("dumbbell") == store.get("dumbbell")
        assert full.history("dumbbell") == store.history("dumbbell")
        assert full.runs("dumbbell") == store.runs("dumbbell")
        # and the other way round: the writer reads what the store wrote
        full.transition("dumbbell", State.SWAPPING_OUT, reason="cleanup")
        assert store.history("dumbbell") == full.history("dumbbell")


def test_state_and_audit_row_are_written_in_one_transaction(
    store: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_experiment_in(store, State.DEFINED)
    before = store.history("dumbbell")

    def broken_audit(*args: object, **kwargs: object) -> None:
        raise RuntimeError("audit write failed")

    monkeypatch.setattr(writer_module, "_record_change", broken_audit)
    with pytest.raises(RuntimeError, match="audit write failed"):
        store.transition("dumbbell", State.SWAPPING_IN)
    monkeypatch.undo()
    assert store.get("dumbbell").state is State.DEFINED
    assert store.history("dumbbell") == before


def test_racing_writers_exactly_one_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(_migrated(tmp_path / "nestbed.db"))
    real_check = writer_module.check_transition
    barrier = threading.Barrier(4)

    def slow_check(*args: object, **kwargs: object) -> None:
        threading.Event().wait(0.05)  # the winner holds the lock while the others arrive
        real_check(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_module, "check_transition", slow_check)
    with open_for_writing(path) as first:
        first.create_experiment(
            "race", source_text="", source_format="ns", source_file=None, ir_json="{}"
        )
    outcomes: list[object] = [None] * 4

    def attempt(i: int) -> None:
        # sqlite3 connections are used by their own thread only
        writer = Writer.open(path)
        assert writer is not None
        barrier.wait()
        try:
            outcomes[i] = writer.transition("race", State.SWAPPING_IN, expect_from=State.DEFINED)
        except NestbedError as exc:
            outcomes[i] = exc
        finally:
            writer.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    won = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(won) == 1 and all(isinstance(o, UserError) for o in outcomes if o not in won)
    with Store.open(path) as full:
        assert [c.to_state for c in full.history("race")] == [State.DEFINED, State.SWAPPING_IN]


def test_what_the_writer_cannot_write_goes_to_the_store(tmp_path: Path) -> None:
    assert Writer.open(str(tmp_path / "none.db")) is None
    assert Writer.open("postgresql://u@localhost/db") is None
    path = _migrated(tmp_path / "old.db")
    with Store.open(str(path)) as full, full.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'older'"))
    assert Writer.open(str(path)) is None
    with open_for_writing(str(tmp_path / "new.db")) as opened:
        assert isinstance(opened, Store) and opened.list() == []
    with open_for_writing(str(tmp_path / "new.db")) as opened:
        assert isinstance(opened, Writer)


def test_a_locked_store_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(_migrated(tmp_path / "nestbed.db"))
    writer = Writer.open(path)
    assert writer is not None
    writer._conn.execute("PRAGMA busy_timeout = 0")  # do not wait 30 s for the holder
    holder = Writer.open(path)
    assert holder is not None
    holder._conn.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(EnvironmentProblem, match=r"cannot open the nestbed database .*locked"):
            writer.start_run("x", tmp_path)
    finally:
        holder._conn.execute("ROLLBACK")
        holder.close()
        writer.close()


class _CutAfterBegin:
    """A connection on which a signal lands as its first BEGIN returns."""

    def __init__(self, conn):  # type: ignore[no-untyped-def]
        self._conn, self.cut = conn, False

    def execute(self, sql, *args):  # type: ignore[no-untyped-def]
        result = self._conn.execute(sql, *args)
        if sql == "BEGIN IMMEDIATE" and not self.cut:
            self.cut = True
            raise KeyboardInterrupt
        return result

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self._conn, name)


def test_a_signal_just_after_begin_leaves_no_transaction_open(tmp_path: Path) -> None:
    writer = Writer.open(str(_migrated(tmp_path / "nestbed.db")))
    assert writer is not None
    writer._conn = _CutAfterBegin(writer._conn)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        writer.create_experiment("a", source_text="", source_format="ns", source_file=None,
                                 ir_json="{}")  # fmt: skip
    # The swap-out after an interrupt writes on the same connection.
    writer.create_experiment("b", source_text="", source_format="ns", source_file=None,
                             ir_json="{}")  # fmt: skip
    assert [r.name for r in writer.list()] == ["b"]
    writer.close()
