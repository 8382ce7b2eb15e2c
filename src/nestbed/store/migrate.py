"""Bring a database's schema up to date by running the alembic migrations in ``migrations/``.

Alembic is configured in code (there is no alembic.ini). All pending migrations run in one
transaction, so a failed migration leaves the schema as it was; on PostgreSQL an advisory lock
stops two processes opening a new database at once from both creating the tables.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from nestbed.errors import InternalError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"
"""The table in which alembic records the schema version of a database."""


def alembic_config(connection: Connection | None = None) -> Config:
    """An alembic configuration for the store, bound to ``connection`` if one is given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest schema version this nestbed knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise InternalError(
            f"no store migrations were found in {MIGRATIONS_DIR}; reinstall nestbed"
        )
    return head


def current_revision(engine: Engine) -> str | None:
    """The schema version of the database behind ``engine`` (None before the first migration)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Run every pending migration on ``engine``'s database, all in one transaction."""
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")
