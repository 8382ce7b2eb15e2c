"""Idle-swap exemptions: a member asks that idle swap-out (and the maximum duration) spare
one of the project's experiments, with a reason, until a time or until it is swapped out; a
leader of the project (or an admin) grants or refuses it. Every step is audited
(``exemption.ask``, ``exemption.grant``, ``exemption.refuse``); the idle loop treats an
experiment as exempt while a granted exemption holds (``store.policies.Policies.exempt``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from nestbed.errors import UserError
from nestbed.server import schemas
from nestbed.server.accounts import AccountName
from nestbed.server.auth import Invalid, NotFound, Who
from nestbed.server.experiments import ExperimentName, owned_experiment
from nestbed.store.policies import Policies
from nestbed.store.records import ExemptionRecord

router = APIRouter(prefix="/v1/projects/{project}", tags=["exemptions"])


def _reply(record: ExemptionRecord, now: datetime | None = None) -> schemas.Exemption:
    now = now or datetime.now(UTC)
    in_force = record.state == "granted" and (record.until is None or record.until > now)
    found = schemas.Exemption.model_validate(record, from_attributes=True)
    return found.model_copy(update={"in_force": in_force})


@router.post("/experiments/{name}/exemption", status_code=201)
def ask(
    project: AccountName, name: ExperimentName, body: schemas.ExemptionAsk, who: Who
) -> schemas.Exemption:
    """Asks a leader of the project to exempt the experiment from idle swap-out."""
    with who.audited("exemption.ask", project=project, experiment=name) as entry:
        owned = owned_experiment(who, project, name)
        until = body.until
        if until is not None:
            until = until if until.tzinfo else until.replace(tzinfo=UTC)
            if until <= datetime.now(UTC):
                raise Invalid(f"the exemption's end {until.isoformat()} is already past")
        record = Policies(who.server.store).ask_exemption(
            project, name, owned.experiment.name, asked_by=who.name, reason=body.reason,
            until=until,
        )  # fmt: skip
        entry.outcome = f"ok: exemption {record.id}: {body.reason}"
    return _reply(record)


@router.get("/exemptions")
def list_exemptions(project: AccountName, who: Who) -> list[schemas.Exemption]:
    """The project's exemptions, oldest first, decided and expired ones included."""
    who.role(project)
    now = datetime.now(UTC)
    return [_reply(r, now) for r in Policies(who.server.store).exemptions(project)]


def _decide(project: str, exemption_id: int, who: Who, note: str, grant: bool) -> ExemptionRecord:
    verb = "grant" if grant else "refuse"
    with who.audited(f"exemption.{verb}", project=project) as entry:
        who.role(project)
        policies = Policies(who.server.store)
        try:
            found = policies.exemption(project, exemption_id)
        except UserError as exc:  # the project has no such exemption
            raise NotFound(str(exc)) from None
        entry.experiment = found.experiment
        who.lead(project, f"{verb} exemptions")
        record = policies.decide(project, exemption_id, by=who.name, grant=grant, note=note)
        entry.outcome = f"ok: exemption {exemption_id}{': ' + note if note else ''}"
    return record


@router.post("/exemptions/{exemption_id}/grant")
def grant(
    project: AccountName, exemption_id: int, who: Who,
    body: schemas.ExemptionDecision | None = None,
) -> schemas.Exemption:  # fmt: skip
    """Grants an exemption waiting for a decision (a leader of the project or an admin)."""
    note = (body or schemas.ExemptionDecision()).note
    return _reply(_decide(project, exemption_id, who, note, grant=True))


@router.post("/exemptions/{exemption_id}/refuse")
def refuse(
    project: AccountName, exemption_id: int, who: Who,
    body: schemas.ExemptionDecision | None = None,
) -> schemas.Exemption:  # fmt: skip
    """Refuses an exemption waiting for a decision (a leader of the project or an admin)."""
    note = (body or schemas.ExemptionDecision()).note
    return _reply(_decide(project, exemption_id, who, note, grant=False))
