"""The versioned schema: migrations run on open, are idempotent, and match ``schema.py``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from nestbed.store import Store, migrate
from nestbed.store.schema import metadata

TABLES = {"experiments", "state_changes", "runs", migrate.VERSION_TABLE, "users", "projects",
          "memberships", "api_tokens", "experiment_owners", "audit_log", "batch_entries",
          "project_settings", "idle_exemptions", "idle_states"}  # fmt: skip


def test_open_creates_tables_and_records_the_schema_version(db_url: str) -> None:
    with Store.open(db_url) as store:
        assert set(sa.inspect(store.engine).get_table_names()) == TABLES
        with store.engine.connect() as conn:
            versions = conn.execute(sa.text(f"SELECT version_num FROM {migrate.VERSION_TABLE}"))
            assert [row[0] for row in versions] == [migrate.head_revision()]


def test_opening_twice_is_idempotent(db_url: str) -> None:
    with Store.open(db_url) as first:
        first.create_experiment(
            "kept", source_text="", source_format="ns", source_file=None, ir_json="{}"
        )
        version = migrate.current_revision(first.engine)
    with Store.open(db_url) as second:
        assert migrate.current_revision(second.engine) == version == migrate.head_revision()
        assert [r.name for r in second.list()] == ["kept"]
        with second.engine.connect() as conn:
            count = conn.execute(sa.text(f"SELECT COUNT(*) FROM {migrate.VERSION_TABLE}"))
            assert count.scalar_one() == 1


def test_migrated_database_matches_schema_module(store: Store) -> None:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []


def test_ddl_is_transactional(store: Store) -> None:
    """What lets all migrations share one transaction: a rolled-back CREATE TABLE is gone."""
    with store.engine.connect() as conn, conn.begin() as transaction:
        conn.execute(sa.text("CREATE TABLE scratch (x INTEGER)"))
        transaction.rollback()
    assert "scratch" not in sa.inspect(store.engine).get_table_names()


def test_the_known_head_is_alembics_and_a_current_database_is_seen_without_alembic(tmp_path):
    assert migrate.head_revision() == migrate.HEAD
    with Store.open(str(tmp_path / "s.db")) as store:
        assert migrate.is_current(store.engine)
        with store.engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'older'"))
        assert not migrate.is_current(store.engine)
