"""The shared testbed's policies in the store: each project's settings, the idle-swap
exemptions asked for and decided, and what idle swap-out remembers of active experiments.

``Policies(store)`` keeps the rows; what they mean (the defaults a setting left unset takes,
whether an experiment is idle, who may grant) is the server's business. Exemption rows stay
after they are decided or expire, as their history.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from nestbed.errors import UserError
from nestbed.store.experiments import Store, utc_now
from nestbed.store.records import ExemptionRecord, ProjectSettingsRecord
from nestbed.store.schema import (
    experiments,
    idle_exemptions,
    idle_states,
    project_settings,
    projects,
    with_stored_name,
    without_experiment_id,
)

SETTINGS = ("idle_s", "warn_before_s", "max_duration_s", "priority_min", "priority_max")
"""A project's settings, each None (the server's default) or its value."""


class Policies:
    """Project settings, exemptions and idle states of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- project settings --------------------------------------------------------------------

    def settings(self, project: str) -> ProjectSettingsRecord:
        """``project``'s settings (every one None when it never set any)."""
        with self.store.reading() as conn:
            row = conn.execute(
                sa.select(project_settings)
                .join(projects, projects.c.id == project_settings.c.project_id)
                .where(projects.c.name == project)
            ).first()
        if row is None:
            return ProjectSettingsRecord(project=project)
        values = {k: getattr(row, k) for k in SETTINGS}
        return ProjectSettingsRecord(project=project, updated_at=row.updated_at,
                                     updated_by=row.updated_by, **values)  # fmt: skip

    def set_settings(
        self, project: str, by: str | None, changes: dict[str, Any]
    ) -> ProjectSettingsRecord:
        """Changes the settings named in ``changes`` (None: back to the default), keeping
        the others."""
        unknown = set(changes) - set(SETTINGS)
        if unknown:
            raise UserError(f"projects have no setting {', '.join(sorted(unknown))}")
        with self.store.transaction() as conn:
            found = conn.execute(projects.select().where(projects.c.name == project)).first()
            if found is None:
                raise UserError(f"there is no project named {project!r}")
            where = project_settings.c.project_id == found.id
            values = {**changes, "updated_at": utc_now(), "updated_by": by}
            if conn.execute(project_settings.select().where(where)).first() is None:
                conn.execute(project_settings.insert().values(project_id=found.id, **values))
            else:
                conn.execute(project_settings.update().where(where).values(**values))
        return self.settings(project)

    # -- exemptions --------------------------------------------------------------------------

    def ask_exemption(
        self, project: str, name: str, stored: str, *, asked_by: str | None, reason: str,
        until: datetime | None,
    ) -> ExemptionRecord:  # fmt: skip
        """A new exemption asked for experiment ``stored`` (``name`` in ``project``);
        refused while another one of it waits for a decision."""
        with self.store.transaction() as conn:
            row = conn.execute(
                experiments.select().where(experiments.c.name == stored).with_for_update()
            ).first()
            if row is None:
                raise UserError(f"there is no experiment {name!r} in project {project!r}")
            waiting = conn.execute(
                idle_exemptions.select().where(
                    idle_exemptions.c.experiment_id == row.id, idle_exemptions.c.state == "asked"
                )
            ).first()
            if waiting is not None:
                raise UserError(
                    f"experiment {name!r} already has exemption {waiting.id} waiting for a "
                    "project leader's decision"
                )
            result = conn.execute(
                idle_exemptions.insert().values(
                    experiment_id=row.id, project=project, experiment=name, asked_by=asked_by,
                    asked_at=utc_now(), reason=reason, until=until, state="asked",
                    decided_by=None, decided_at=None, note="",
                )
            )  # fmt: skip
            (new_id,) = result.inserted_primary_key or (None,)
            return _exemption(conn.execute(_select().where(idle_exemptions.c.id == new_id)).one())

    def exemptions(
        self, project: str | None = None, *, stored: str | None = None
    ) -> builtins.list[ExemptionRecord]:
        """The exemptions (of ``project``, of experiment ``stored``), oldest first."""
        query = _select().order_by(idle_exemptions.c.id)
        if project is not None:
            query = query.where(idle_exemptions.c.project == project)
        if stored is not None:
            query = query.where(experiments.c.name == stored)
        with self.store.reading() as conn:
            return [_exemption(r) for r in conn.execute(query).all()]

    def exemption(self, project: str, exemption_id: int) -> ExemptionRecord:
        """Exemption ``exemption_id`` of ``project``; ``UserError`` if it has none."""
        with self.store.reading() as conn:
            row = conn.execute(
                _select().where(
                    idle_exemptions.c.id == exemption_id, idle_exemptions.c.project == project
                )
            ).first()
        if row is None:
            raise UserError(f"project {project!r} has no exemption {exemption_id}")
        return _exemption(row)

    def decide(
        self, project: str, exemption_id: int, *, by: str | None, grant: bool, note: str
    ) -> ExemptionRecord:
        """Grants or refuses an exemption still waiting for a decision."""
        with self.store.transaction() as conn:
            done = conn.execute(
                idle_exemptions.update()
                .where(
                    idle_exemptions.c.id == exemption_id,
                    idle_exemptions.c.project == project,
                    idle_exemptions.c.state == "asked",
                )
                .values(
                    state="granted" if grant else "refused",
                    decided_by=by,
                    decided_at=utc_now(),
                    note=note,
                )
            )
        if done.rowcount != 1:
            found = self.exemption(project, exemption_id)
            raise UserError(f"exemption {exemption_id} was already {found.state}")
        return self.exemption(project, exemption_id)

    def exempt(self, stored: str, now: datetime) -> ExemptionRecord | None:
        """The exemption granted to experiment ``stored`` that holds at ``now``, if any."""
        query = _select().where(
            experiments.c.name == stored,
            idle_exemptions.c.state == "granted",
            sa.or_(idle_exemptions.c.until.is_(None), idle_exemptions.c.until > now),
        )
        with self.store.reading() as conn:
            row = conn.execute(query.order_by(idle_exemptions.c.id.desc())).first()
        return None if row is None else _exemption(row)

    # -- idle states -------------------------------------------------------------------------

    def idle_state(self, stored: str) -> str | None:
        """The idle state last saved for experiment ``stored`` (JSON), if any."""
        with self.store.reading() as conn:
            row = conn.execute(
                sa.select(idle_states.c.state_json)
                .join(experiments, experiments.c.id == idle_states.c.experiment_id)
                .where(experiments.c.name == stored)
            ).first()
        return None if row is None else str(row.state_json)

    def save_idle_state(self, stored: str, state_json: str) -> None:
        with self.store.transaction() as conn:
            found = conn.execute(experiments.select().where(experiments.c.name == stored)).first()
            if found is None:
                return  # deleted meanwhile: nothing to remember
            where = idle_states.c.experiment_id == found.id
            values = {"state_json": state_json, "updated_at": utc_now()}
            if conn.execute(idle_states.select().where(where)).first() is None:
                conn.execute(idle_states.insert().values(experiment_id=found.id, **values))
            else:
                conn.execute(idle_states.update().where(where).values(**values))

    def forget_idle_states(self, keep: set[str]) -> None:
        """Drops the idle states of every experiment not in ``keep`` (no longer active)."""
        kept = sa.select(experiments.c.id).where(experiments.c.name.in_(sorted(keep)))
        with self.store.transaction() as conn:
            conn.execute(idle_states.delete().where(idle_states.c.experiment_id.not_in(kept)))


def _select() -> sa.Select[Any]:
    return with_stored_name(idle_exemptions)


def _exemption(row: sa.Row[Any]) -> ExemptionRecord:
    return ExemptionRecord(**without_experiment_id(row))
