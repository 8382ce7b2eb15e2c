"""Bring a database's schema up to date by running the alembic migrations in ``migrations/``.

Alembic is configured in code (there is no alembic.ini). All pending migrations run in one
transaction, so a failed migration leaves the schema as it was; on PostgreSQL an advisory lock
stops two processes opening a new database at once from both creating the tables.

Every command opens the store, and alembic with its migration scripts takes a few hundred ms
to load: a database whose version table already says ``HEAD`` is known current after one
query (``is_current``), and alembic is loaded only when there is something to migrate.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nestbed.errors import InternalError

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection, Engine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"
"""The table in which alembic records the schema version of a database."""
HEAD = "0004"
"""The newest migration's revision (tests/store checks it is alembic's head)."""


def is_current(engine: Engine) -> bool:
    """Whether the database says it is at ``HEAD``, read with one query and no alembic."""
    import sqlalchemy as sa

    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
    except sa.exc.DBAPIError:  # no version table yet (a new database), or unreadable
        return False
    return [tuple(row) for row in rows] == [(HEAD,)]


def alembic_config(connection: Connection | None = None) -> Config:
    """An alembic configuration for the store, bound to ``connection`` if one is given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest schema version this nestbed knows (from the migration scripts)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise InternalError(
            f"no store migrations were found in {MIGRATIONS_DIR}; reinstall nestbed"
        )
    return head


def current_revision(engine: Engine) -> str | None:
    """The schema version of the database behind ``engine`` (None before the first migration)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Run every pending migration on ``engine``'s database, all in one transaction."""
    from alembic import command

    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")
