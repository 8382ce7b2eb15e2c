"""A project's policy settings: its idle threshold, warning lead, maximum duration and batch
priority limits. A setting the project left unset takes the server's default (``nestbed
serve --idle-s ...``, Emulab's 4 h, 30 min and 16 h unless told otherwise; any priority).

Members read them; a leader of the project (or an admin) changes them, audited as
``settings.set``. The idle loop judges each experiment by its project's settings and batch
submissions are checked against its priority limits.
"""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter

from nestbed.errors import UserError
from nestbed.server import schemas
from nestbed.server.accounts import AccountName
from nestbed.server.auth import Invalid, Who
from nestbed.server.idle import idle_settings
from nestbed.store.policies import Policies
from nestbed.store.records import ProjectSettingsRecord

router = APIRouter(prefix="/v1/projects/{project}", tags=["projects"])


def _reply(who: Who, own: ProjectSettingsRecord) -> schemas.ProjectSettings:
    effective = idle_settings(who.server.config.idle, own)
    return schemas.ProjectSettings(
        project=own.project,
        own=schemas.SettingsChange(
            idle_s=own.idle_s, warn_before_s=own.warn_before_s,
            max_duration_s=own.max_duration_s, priority_min=own.priority_min,
            priority_max=own.priority_max,
        ),
        idle_s=effective.idle_s, warn_before_s=effective.warn_before_s,
        max_duration_s=effective.max_duration_s, priority_min=own.priority_min,
        priority_max=own.priority_max, updated_at=own.updated_at, updated_by=own.updated_by,
    )  # fmt: skip


@router.get("/settings")
def show(project: AccountName, who: Who) -> schemas.ProjectSettings:
    """The project's settings in force, and which of them it set itself (``own``)."""
    who.role(project)
    return _reply(who, Policies(who.server.store).settings(project))


@router.patch("/settings")
def change(project: AccountName, body: schemas.SettingsChange, who: Who) -> schemas.ProjectSettings:
    """Changes the settings the body names (null: back to the server's default), keeping the
    others (a leader of the project or an admin)."""
    changes = body.model_dump(exclude_unset=True)
    said = ", ".join(f"{k}={v}" for k, v in sorted(changes.items())) or "nothing"
    with who.audited("settings.set", project=project) as entry:
        who.lead(project, "change its settings")
        policies = Policies(who.server.store)
        merged = replace(policies.settings(project), **changes)
        try:  # the whole, as the loop will use it, before anything is stored
            idle_settings(who.server.config.idle, merged)
        except UserError as exc:
            raise Invalid(str(exc).replace("idle setting ", "setting ")) from None
        low, high = merged.priority_min, merged.priority_max
        if low is not None and high is not None and low > high:
            raise Invalid(f"setting priority_min ({low}) must not be above priority_max ({high})")
        saved = policies.set_settings(project, who.name, changes)
        entry.outcome = f"ok: {said}"
    return _reply(who, saved)
