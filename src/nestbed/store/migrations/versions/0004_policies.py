"""The shared testbed's policies per project and per experiment: a project's settings (idle
threshold, warning lead, maximum duration, batch priority limits), idle-swap exemptions
asked for and decided, and what idle swap-out remembers of each active experiment.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

Written out in full rather than imported from ``nestbed.store.schema``, as 0001 is.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EXEMPTION_STATES = ("asked", "granted", "refused")


def upgrade() -> None:
    op.create_table(
        "project_settings",
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
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(64), nullable=True),
    )
    op.create_table(
        "idle_exemptions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("experiment", sa.String(255), nullable=False),
        sa.Column("asked_by", sa.String(64), nullable=True),
        sa.Column("asked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("decided_by", sa.String(64), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("note", sa.Text, nullable=False),
        sa.CheckConstraint(
            f"state IN ({', '.join(repr(s) for s in EXEMPTION_STATES)})",
            name="ck_idle_exemptions_state",
        ),
    )
    op.create_index("ix_idle_exemptions_experiment_id", "idle_exemptions", ["experiment_id"])
    op.create_index("ix_idle_exemptions_project", "idle_exemptions", ["project"])
    op.create_table(
        "idle_states",
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("state_json", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idle_states")
    op.drop_index("ix_idle_exemptions_project", table_name="idle_exemptions")
    op.drop_index("ix_idle_exemptions_experiment_id", table_name="idle_exemptions")
    op.drop_table("idle_exemptions")
    op.drop_table("project_settings")
