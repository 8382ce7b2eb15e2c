"""The batch queue in the store: submissions of a project's experiments, and their moves.

``BatchQueue(store)`` keeps the rows; which entry starts next and how an entry moves after
an attempt is ``server.batch``'s decision, which the server saves here with ``save``. Rows
stay after their entry ends (done, failed, cancelled), as the queue's history.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from nestbed.errors import UserError
from nestbed.store.experiments import Store, utc_now
from nestbed.store.records import BatchRecord
from nestbed.store.schema import batch_entries, experiments, with_stored_name, without_experiment_id

_SAVED = ("state", "attempts", "last_failure_at", "last_failure", "passed_over")


class BatchQueue:
    """The batch entries of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def submit(
        self, project: str, name: str, stored: str, *, priority: int, submitted_by: str | None
    ) -> BatchRecord:
        """Queues experiment ``stored`` (``name`` in ``project``); refused while it has an
        entry queued or running."""
        with self.store.transaction() as conn:
            row = conn.execute(
                experiments.select().where(experiments.c.name == stored).with_for_update()
            ).first()
            if row is None:
                raise UserError(f"there is no experiment {name!r} in project {project!r}")
            waiting = conn.execute(
                batch_entries.select().where(
                    batch_entries.c.experiment_id == row.id,
                    batch_entries.c.state.in_(("queued", "running")),
                )
            ).first()
            if waiting is not None:
                raise UserError(
                    f"experiment {name!r} is already in the batch queue (entry {waiting.id}, "
                    f"{waiting.state}); cancel that entry first"
                )
            result = conn.execute(
                batch_entries.insert().values(
                    experiment_id=row.id, project=project, experiment=name,
                    submitted_by=submitted_by, submitted_at=utc_now(), priority=priority,
                    state="queued", attempts=0, last_failure_at=None, last_failure="",
                    passed_over=0,
                )
            )  # fmt: skip
            (entry_id,) = result.inserted_primary_key or (None,)
            return _record(conn.execute(_select().where(batch_entries.c.id == entry_id)).one())

    def entries(
        self, project: str | None = None, states: tuple[str, ...] | None = None
    ) -> builtins.list[BatchRecord]:
        """The entries (of ``project``, in ``states``), oldest first."""
        query = _select().order_by(batch_entries.c.id)
        if project is not None:
            query = query.where(batch_entries.c.project == project)
        if states is not None:
            query = query.where(batch_entries.c.state.in_(states))
        with self.store.reading() as conn:
            return [_record(r) for r in conn.execute(query).all()]

    def get(self, project: str, entry_id: int) -> BatchRecord:
        """Entry ``entry_id`` of ``project``; ``UserError`` if the project has none."""
        with self.store.reading() as conn:
            row = conn.execute(
                _select().where(batch_entries.c.id == entry_id, batch_entries.c.project == project)
            ).first()
        if row is None:
            raise UserError(f"project {project!r} has no batch entry {entry_id}")
        return _record(row)

    def states(self, entry_ids: builtins.list[int]) -> dict[int, str]:
        """The states of entries ``entry_ids`` (those that exist)."""
        if not entry_ids:
            return {}
        query = sa.select(batch_entries.c.id, batch_entries.c.state).where(
            batch_entries.c.id.in_(entry_ids)
        )
        with self.store.reading() as conn:
            return {row.id: row.state for row in conn.execute(query).all()}

    def save(self, entry_id: int, expect_state: str, **changes: Any) -> None:
        """Writes an entry's new state and counters, if it is still in ``expect_state``
        (``UserError`` otherwise: someone moved it meanwhile)."""
        unknown = set(changes) - set(_SAVED)
        if unknown:
            raise UserError(f"batch entries do not keep {', '.join(sorted(unknown))}")
        with self.store.transaction() as conn:
            done = conn.execute(
                batch_entries.update()
                .where(batch_entries.c.id == entry_id, batch_entries.c.state == expect_state)
                .values(**changes)
            )
        if done.rowcount != 1:
            raise UserError(f"batch entry {entry_id} is no longer {expect_state}")


def _select() -> sa.Select[Any]:
    return with_stored_name(batch_entries)


def _record(row: sa.Row[Any]) -> BatchRecord:
    return BatchRecord(**without_experiment_id(row))


def seconds(at: datetime | None) -> float | None:
    """A stored time as seconds of the Unix clock (None stays None)."""
    return None if at is None else at.timestamp()
