"""Alembic's entry point for the store's migrations; always run through ``nestbed.store.migrate``.

It expects an open connection in ``config.attributes["connection"]``, already inside the
transaction that the migrations must share.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from nestbed.errors import InternalError
from nestbed.store.schema import metadata

MIGRATION_LOCK_ID = 0x6E657374  # "nest": the PostgreSQL advisory lock held while migrating


def run_migrations_online() -> None:
    """Run the pending migrations on the connection handed over by ``nestbed.store.migrate``."""
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise InternalError(
            "the store's migrations were started without a connection; "
            "run them through nestbed.store.migrate.upgrade"
        )
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=context.config.get_main_option("version_table") or "alembic_version",
        render_as_batch=connection.dialect.name == "sqlite",
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise InternalError("the store's migrations run only online, against a live connection")
run_migrations_online()
