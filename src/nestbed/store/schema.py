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
from nestbed.store.definitions import SOURCE_FORMATS
from nestbed.store.states import State


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

# -- a shared testbed's accounts (the server, issue 22) ----------------------------------------

ROLES: tuple[str, ...] = ("leader", "member")
"""A project member's role: a leader also adds and removes members."""

ACCOUNT_NAME_PATTERN = r"[a-z][a-z0-9]*(-[a-z0-9]+)*"
"""What a user or project name may be: lower case, digits and single '-' between them (so
``PROJECT--EXPERIMENT`` names one experiment of one project unambiguously)."""

_roles = ", ".join(f"'{r}'" for r in ROLES)

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("is_admin", sa.Boolean, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("name", name="uq_users_name"),
)

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(64), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("name", name="uq_projects_name"),
)

memberships = sa.Table(
    "memberships",
    metadata,
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column(
        "user_id",
        sa.Integer,
        sa.ForeignKey("users.id", ondelete="CASCADE"),
        primary_key=True,
        index=True,
    ),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("added_at", UTCDateTime, nullable=False),
    sa.CheckConstraint(f"role IN ({_roles})", name="ck_memberships_role"),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "user_id",
        sa.Integer,
        sa.ForeignKey("users.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("token_sha256", sa.String(64), nullable=False),
    sa.Column("label", sa.String(64), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("token_sha256", name="uq_api_tokens_token_sha256"),
)

experiment_owners = sa.Table(
    "experiment_owners",
    metadata,
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="RESTRICT"),
        nullable=False,
    ),
    sa.Column(
        "creator_id",
        sa.Integer,
        sa.ForeignKey("users.id", ondelete="SET NULL"),
        nullable=True,
    ),
    sa.Column("name", sa.String(255), nullable=False),
    sa.UniqueConstraint("project_id", "name", name="uq_experiment_owners_project_name"),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("actor", sa.String(64), nullable=True),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("project", sa.String(64), nullable=True, index=True),
    sa.Column("experiment", sa.String(255), nullable=True),
    sa.Column("outcome", sa.Text, nullable=False),
)
"""Who did what to which experiment, when, and how it ended; names, not ids, so a row
outlives the user, project or experiment it names."""

BATCH_STATES: tuple[str, ...] = ("queued", "running", "done", "failed", "cancelled")
"""A batch entry's states (``server.batch`` moves them)."""

_batch_states = ", ".join(f"'{s}'" for s in BATCH_STATES)

batch_entries = sa.Table(
    "batch_entries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("project", sa.String(64), nullable=False, index=True),
    sa.Column("experiment", sa.String(255), nullable=False),
    sa.Column("submitted_by", sa.String(64), nullable=True),
    sa.Column("submitted_at", UTCDateTime, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_failure_at", UTCDateTime, nullable=True),
    sa.Column("last_failure", sa.Text, nullable=False),
    sa.Column("passed_over", sa.Integer, nullable=False),
    sa.CheckConstraint(f"state IN ({_batch_states})", name="ck_batch_entries_state"),
)
"""The batch queue: one row per submission of an experiment, kept after it ends."""

project_settings = sa.Table(
    "project_settings",
    metadata,
    sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("idle_s", sa.Float, nullable=True),
    sa.Column("warn_before_s", sa.Float, nullable=True),
    sa.Column("max_duration_s", sa.Float, nullable=True),
    sa.Column("priority_min", sa.Integer, nullable=True),
    sa.Column("priority_max", sa.Integer, nullable=True),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("updated_by", sa.String(64), nullable=True),
)
"""A project's policy settings; a column left NULL takes the server's default."""

EXEMPTION_STATES: tuple[str, ...] = ("asked", "granted", "refused")
"""An idle-swap exemption's states: asked by a member, then granted or refused by a leader."""

_exemption_states = ", ".join(f"'{s}'" for s in EXEMPTION_STATES)

idle_exemptions = sa.Table(
    "idle_exemptions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("project", sa.String(64), nullable=False, index=True),
    sa.Column("experiment", sa.String(255), nullable=False),
    sa.Column("asked_by", sa.String(64), nullable=True),
    sa.Column("asked_at", UTCDateTime, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("until", UTCDateTime, nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("decided_by", sa.String(64), nullable=True),
    sa.Column("decided_at", UTCDateTime, nullable=True),
    sa.Column("note", sa.Text, nullable=False),
    sa.CheckConstraint(f"state IN ({_exemption_states})", name="ck_idle_exemptions_state"),
)
"""Idle-swap exemptions: one row per request, kept after it is decided or has expired."""

idle_states = sa.Table(
    "idle_states",
    metadata,
    sa.Column(
        "experiment_id",
        sa.Integer,
        sa.ForeignKey("experiments.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("state_json", sa.Text, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)
"""What idle swap-out remembers of an active experiment (``server.idle.IdleState``), so a
restarted server does not start its idle time again."""


def with_stored_name(table: sa.Table) -> sa.Select[Any]:
    """``table``'s rows (which point at an experiment by id) with that experiment's stored
    name as ``stored_name``."""
    return sa.select(table, experiments.c.name.label("stored_name")).join(
        experiments, table.c.experiment_id == experiments.c.id
    )


def without_experiment_id(row: sa.Row[Any]) -> dict[str, Any]:
    """A row of ``with_stored_name`` as a record's fields (the id stays in the store)."""
    values = dict(row._mapping)
    values.pop("experiment_id")
    return values
