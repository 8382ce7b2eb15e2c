"""The batch queue: one row per submission of an experiment (its project's name for it, who
submitted it, priority, state, attempts, the last failure, how often it was passed over).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

Written out in full rather than imported from ``nestbed.store.schema``, as 0001 is.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = ("queued", "running", "done", "failed", "cancelled")


def upgrade() -> None:
    op.create_table(
        "batch_entries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "experiment_id",
            sa.Integer,
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("experiment", sa.String(255), nullable=False),
        sa.Column("submitted_by", sa.String(64), nullable=True),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_failure", sa.Text, nullable=False),
        sa.Column("passed_over", sa.Integer, nullable=False),
        sa.CheckConstraint(
            f"state IN ({', '.join(repr(s) for s in STATES)})", name="ck_batch_entries_state"
        ),
    )
    op.create_index("ix_batch_entries_experiment_id", "batch_entries", ["experiment_id"])
    op.create_index("ix_batch_entries_project", "batch_entries", ["project"])


def downgrade() -> None:
    op.drop_index("ix_batch_entries_project", table_name="batch_entries")
    op.drop_index("ix_batch_entries_experiment_id", table_name="batch_entries")
    op.drop_table("batch_entries")
