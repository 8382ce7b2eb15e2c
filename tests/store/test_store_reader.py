"""The read-only path of the commands that only look: the same records as the store's, from a
SQLite store at the current schema; anything else goes to the full store."""

from __future__ import annotations

import sqlalchemy as sa

from nestbed.store import State, Store, migrate
from nestbed.store.reader import Reader, open_for_reading

IR = '{"name": "x"}'


def _filled(path) -> Store:  # type: ignore[no-untyped-def]
    store = Store.open(str(path))
    for name in ("beta", "alpha"):
        store.create_experiment(name, source_text="set ns [new Simulator]", source_format="ns",
                                source_file=f"{name}.ns", ir_json=IR)  # fmt: skip
    store.transition("alpha", State.SWAPPING_IN, expect_from=State.DEFINED, reason="swapin")
    run = store.start_run("alpha", "/tmp/results/alpha-1")
    store.end_run(run, "completed")
    store.start_run("alpha", "/tmp/results/alpha-2")
    return store


def test_the_reader_sees_what_the_store_sees(tmp_path):
    path = tmp_path / "s.db"
    with _filled(path) as store, Reader.open(str(path)) as reader:
        assert reader.list() == store.list()
        assert reader.get("alpha") == store.get("alpha")
        assert reader.find("nobody") is None
        assert reader.runs("alpha") == store.runs("alpha")
        assert reader.history("alpha") == store.history("alpha")
        assert reader.runs("alpha")[-1].ended_at is None
        assert reader.runs("alpha", open_only=True) == store.runs("alpha", open_only=True)
        assert [r.results_dir for r in reader.runs("alpha", open_only=True)] == [
            "/tmp/results/alpha-2"
        ]


def test_what_the_reader_cannot_read_goes_to_the_store(tmp_path):
    assert Reader.open(str(tmp_path / "none.db")) is None  # nothing to read: created by Store
    assert not (tmp_path / "none.db").exists()
    assert Reader.open("postgresql://u@localhost/db") is None
    path = tmp_path / "old.db"
    with _filled(path) as store, store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'older'"))
    assert Reader.open(str(path)) is None
    with open_for_reading(str(tmp_path / "new.db")) as store:
        assert isinstance(store, Store) and store.list() == []
