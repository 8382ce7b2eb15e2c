"""The store's tables as SQLAlchemy Core objects, which the queries in ``experiments`` use.

The database itself is created and changed only by the migrations in ``migrations/versions``;
``tests/store`` checks that these tables and the migrated database agree. Timestamps are stored
as UTC and always come back as timezone-aware UTC datetimes, on SQLite as on PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from nestbed.errors import InternalError
from nestbed.store.states import State

SOURCE_FORMATS: tuple[str, ...] = ("ns", "yaml", "python")
"""The languages an experiment's source may be written in."""

NAME_PATTERN = r"[-0-9A-Za-z]+"
"""What an experiment name may contain (names become parts of host names)."""


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware datetime stored as UTC; naive datetimes are refused as a bug."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise InternalError(f"timestamp {value.isoformat()} has no time zone; this is a bug")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = sa.MetaData()

_states = ", ".join(f"'{s.value}'" for s in State)
_formats = ", ".join(f"'{f}'" for f in SOURCE_FORMATS)

experiments = sa.Table(
    "experiments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("source_text", sa.Text, nullable=False),
    sa.Column("source_format", sa.String(16), nullable=False),
    sa.Column("source_file", sa.Text, nullable=True),
    sa.Column("source_sha256", sa.String(64), nullable=False),
    sa.Column("ir_json", sa.Text, nullable=False),
    sa.Column("ir_sha256", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("state_changed_at", UTCDateTime, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.UniqueConstraint("name", name="uq_experiments_name"),
    sa.CheckConstraint(f"state IN ({_states})", name="ck_experiments_state"),
    sa.CheckConstraint(f"source_format IN ({_formats})", name="ck_experiments_source_format"),
)

state_changes = sa.Table(
    "state_changes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("experiment_name", sa.String(255), nullable=False),
    sa.Column("from_state", sa.String(16), nullable=True),
    sa.Column("to_state", sa.String(16), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("ended_at", UTCDateTime, nullable=True),
    sa.Column("outcome", sa.Text, nullable=True),
    sa.Column("results_dir", sa.Text, nullable=False),
)
