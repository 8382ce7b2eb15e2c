"""The API of the batch queue (Emulab's batch mode): a member submits one of the project's
experiments (at a priority within the project's limits, ``settings``), lists the project's
entries, cancels one. The server's loop starts each entry as a whole run when it fits
(``policies.BatchRunner``); cancelling a running entry ends its run and swaps it out, its
results kept. Every change is audited.
"""

from __future__ import annotations

from fastapi import APIRouter

from nestbed.errors import UserError
from nestbed.server import schemas
from nestbed.server.accounts import AccountName
from nestbed.server.auth import NotFound, Who
from nestbed.server.batch import check_priority
from nestbed.server.experiments import ExperimentName, owned_experiment
from nestbed.server.policies import NoRoom
from nestbed.store.policies import Policies
from nestbed.store.queue import BatchQueue
from nestbed.store.records import BatchRecord

router = APIRouter(prefix="/v1/projects/{project}", tags=["batch"])


def _reply(record: BatchRecord) -> schemas.BatchEntry:
    return schemas.BatchEntry.model_validate(record, from_attributes=True)


@router.post("/experiments/{name}/batch", status_code=201)
def submit(
    project: AccountName, name: ExperimentName, who: Who, body: schemas.BatchSubmit | None = None
) -> schemas.BatchEntry:
    """Queues the experiment: it runs (swap in, run, swap out) once it fits on the machine;
    one that could never fit, even alone, is refused now."""
    with who.audited("batch.submit", project=project, experiment=name) as entry:
        owned = owned_experiment(who, project, name)
        priority = (body or schemas.BatchSubmit()).priority
        check_priority(Policies(who.server.store).settings(project), priority)
        decision = who.server.admission.decide(who.server.store, owned.experiment.name)
        if not decision.fits_empty:
            raise NoRoom(decision.reason)
        record = BatchQueue(who.server.store).submit(
            project, name, owned.experiment.name, priority=priority, submitted_by=who.name,
        )  # fmt: skip
        entry.outcome = f"ok: entry {record.id}"
    return _reply(record)


@router.get("/batch")
def list_entries(project: AccountName, who: Who) -> list[schemas.BatchEntry]:
    """The project's batch entries, oldest first, ended ones included."""
    who.role(project)
    return [_reply(r) for r in BatchQueue(who.server.store).entries(project)]


@router.delete("/batch/{entry_id}")
def cancel(project: AccountName, entry_id: int, who: Who) -> schemas.BatchEntry:
    """Cancels an entry: a queued one never starts; a running one's run is ended and the
    experiment swapped out (by the server's loop, as soon as its swap-in is over), its
    results kept (at the loop's next tick)."""
    with who.audited("batch.cancel", project=project) as entry:
        who.role(project)
        queue = BatchQueue(who.server.store)
        try:
            record = queue.get(project, entry_id)
        except UserError as exc:  # the project has no such entry
            raise NotFound(str(exc)) from None
        entry.experiment = record.experiment
        if record.state not in ("queued", "running"):
            raise UserError(
                f"batch entry {entry_id} is {record.state} already; only a queued or running "
                "entry can be cancelled"
            )
        queue.save(entry_id, record.state, state="cancelled")
        if record.state == "running":
            entry.outcome = f"ok: entry {entry_id}: its run will be ended"
    return _reply(queue.get(project, entry_id))
