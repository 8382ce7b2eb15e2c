"""Initial schema: experiments, their state changes, and their runs.

Revision ID: 0001
Revises:
Create Date: 2025-11-22

Written out in full rather than imported from ``nestbed.store.schema``, so that this migration
keeps creating exactly this schema however the tables change later.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = ("defined", "swapping-in", "active", "swapping-out", "swapped", "failed")
SOURCE_FORMATS = ("ns", "yaml", "python")


def _in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("source_text", sa.Text, nullable=False),
        sa.Column("source_format", sa.String(16), nullable=False),
        sa.Column("source_file", sa.Text, nullable=True),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("ir_json", sa.Text, nullable=False),
        sa.Column("ir_sha256", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state_changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.UniqueConstraint("name", name="uq_experiments_name"),
        sa.CheckConstraint(_in("state", STATES), name="ck_experiments_state"),
        sa.CheckConstraint(
            _in("source_format", SOURCE_FORMATS), name="ck_experiments_source_format"
        ),
    )
    op.create_table(
        "state_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("experiment_name", sa.String(255), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
    )
    op.create_index("ix_state_changes_experiment_id", "state_changes", ["experiment_id"])
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.Text, nullable=True),
        sa.Column("results_dir", sa.Text, nullable=False),
    )
    op.create_index("ix_runs_experiment_id", "runs", ["experiment_id"])


def downgrade() -> None:
    op.drop_index("ix_runs_experiment_id", table_name="runs")
    op.drop_table("runs")
    op.drop_index("ix_state_changes_experiment_id", table_name="state_changes")
    op.drop_table("state_changes")
    op.drop_table("experiments")
