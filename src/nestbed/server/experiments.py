"""The API of a project's experiments: define from an uploaded file, list, show, status,
swap in, swap out, run, delete. Everything goes through the life cycle (``Testbed``) under
the experiment's stored name (``PROJECT--NAME``); every change is audited.

Swap-ins, swap-outs and runs are long: the request checks what it can at once (the caller,
the experiment's state, room on the machine for a swap-in or run (``policies.Admission``),
no other operation running), starts the work in a worker thread
(``operations``) and answers 202 with the experiment's state; ``status`` says how the
operation went. An experiment of a project the caller is not in is answered 404.

Requests that change experiments take a turn first (``write_turn``): at most
``WRITE_TURNS`` of them hold a worker thread at once, the others wait in the event loop,
so reads keep threads free while the store's single writer serialises the writes anyway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, TypeAdapter

from nestbed.errors import NestbedError, UserError
from nestbed.model.options import RunOptions
from nestbed.server import confinement, definitions, schemas
from nestbed.server.accounts import AccountName
from nestbed.server.auth import Caller, Invalid, NotFound, Who
from nestbed.server.operations import Busy, Operation
from nestbed.server.policies import whole_run
from nestbed.store import State
from nestbed.store.accounts import stored_name, users_text
from nestbed.store.records import AuditRecord, OwnedExperiment
from nestbed.store.states import check_transition

router = APIRouter(prefix="/v1/projects/{project}/experiments", tags=["experiments"])

NOTICES = 5  # the server's own newest audit rows of an experiment that status shows
WARNINGS = 200  # the newest idle warnings of a project that its list looks through

WRITE_TURNS = 4  # the writes that may hold worker threads at once (of anyio's 40)

ExperimentName = Annotated[str, PathParam(pattern=schemas.EXPERIMENT_NAME_PATTERN)]


async def write_turn() -> AsyncIterator[None]:
    """A write's turn, held around its handler: FastAPI lets ``WRITE_TURNS`` in at once and
    keeps the others waiting in the event loop, where waiting takes no worker thread."""
    yield


# One object for every writing route (its first dependency): they share the one limit.
Writes = [Depends(write_turn, scope="function", max_concurrency=WRITE_TURNS)]


def owned_experiment(who: Caller, project: str, name: str) -> OwnedExperiment:
    """Experiment ``name`` of ``project``; ``NotFound`` alike for a project the caller is
    not in and for an experiment the project does not have."""
    who.role(project)
    found = who.server.accounts.experiment(project, name)
    if found is None:
        raise NotFound(f"project {project!r} has no experiment {name!r}")
    return found


def seen_experiment(who: Caller, project: str, name: str) -> tuple[Operation | None,
                                                                   OwnedExperiment]:  # fmt: skip
    """The experiment's last operation, then its record, in that order: an operation seen
    ended has written its state already, so the two agree. (Read the other way round, a
    swap-out that ended between the two reads showed as done beside a record still
    ``swapping-out``, which a loaded CI machine made happen.)"""
    op = who.server.operations.seen(stored_name(project, name))
    return op, owned_experiment(who, project, name)


def _reply(who: Caller, seen: tuple[Operation | None, OwnedExperiment],
           kind: type[Any] = schemas.Experiment, **extra: Any) -> Any:  # fmt: skip
    op, owned = seen
    record = owned.experiment
    operation = None if op is None else schemas.Operation(
        kind=op.kind, actor=op.actor, status=op.status, started_at=op.started_at,  # type: ignore[arg-type]
        ended_at=op.ended_at, error=_said(op.error, owned),
    )  # fmt: skip
    return kind(
        project=owned.project, name=owned.name, stored_name=record.name, creator=owned.creator,
        state=record.state, error=_said(record.error, owned), source_file=record.source_file,
        source_format=record.source_format, source_sha256=record.source_sha256,
        created_at=record.created_at, updated_at=record.updated_at, operation=operation,
        **extra,
    )  # fmt: skip


def _said(text: str | None, owned: OwnedExperiment) -> str | None:
    """What the life cycle said of the experiment, in its users' name for it."""
    return None if text is None else users_text(text, owned.project, owned.name)


def _parse(who: Caller, project: str, body: schemas.ExperimentFile) -> definitions.Definition:
    try:
        return definitions.parse(project, body, who.server.config.max_file_bytes)
    except NestbedError as exc:
        if type(exc) is UserError:
            raise Invalid(str(exc)) from None  # the file or its parameters: 422 too
        raise


_EXPERIMENTS = TypeAdapter(list[schemas.Experiment])


def _json(value: BaseModel | list[schemas.Experiment]) -> Response:
    """``value``, built of the reply's own models, as its JSON: the hot reads skip FastAPI's
    second validation of what they have just built, and its detour through Python's json
    (their routes name their models for the OpenAPI schema)."""
    data = _EXPERIMENTS.dump_json(value) if isinstance(value, list) else value.model_dump_json()
    return Response(data, media_type="application/json")


@router.get("", response_model=list[schemas.Experiment])
def list_experiments(project: AccountName, who: Who) -> Response:
    """The project's experiments, by name."""
    who.role(project)
    ops = who.server.operations.seen_all()  # before the records: see ``seen_experiment``
    owned = who.server.accounts.experiments(project)
    warned = who.server.accounts.audit_log(project, WARNINGS, by_server=True, action="idle.warn")
    return _json([_reply(who, (ops.get(o.experiment.name), o), warning=_warning(o, warned))
                  for o in owned])  # fmt: skip


def _warning(owned: OwnedExperiment, rows: list[AuditRecord]) -> str | None:
    """The server's newest idle warning of the experiment since it was swapped in (while it
    is active), from audit ``rows``."""
    record = owned.experiment
    if record.state != State.ACTIVE:
        return None
    found = [r for r in rows if r.action == "idle.warn" and r.experiment == owned.name
             and r.at >= record.state_changed_at]  # fmt: skip
    return found[-1].outcome if found else None


@router.post("", status_code=201, dependencies=Writes)
def create(project: AccountName, body: schemas.ExperimentFile, who: Who) -> schemas.Experiment:
    """Parses the file (ns-2 in the Tcl sandbox, or YAML) and stores a new experiment;
    a bad file is a 422 listing each problem with its file and line."""
    named = body.name or Path(body.file_name).stem
    with who.audited("create", project=project, experiment=named) as entry:
        who.role(project)
        found = _parse(who, project, body)
        owned = who.server.accounts.create_experiment(project, found.name, who.name,
                                                      **found.fields())  # fmt: skip
        entry.experiment = found.name
    return _reply(who, (None, owned))


@router.put("/{name}", dependencies=Writes)
def define(
    project: AccountName, name: ExperimentName, body: schemas.ExperimentFile, who: Who,
    response: Response,
) -> schemas.Experiment:  # fmt: skip
    """Creates the experiment, or replaces its definition while it is not swapped in."""
    body = body.model_copy(update={"name": name})
    with who.audited("define", project=project, experiment=name) as entry:
        who.role(project)
        found = _parse(who, project, body)
        accounts = who.server.accounts
        owned = accounts.experiment(project, name)
        if owned is None:
            owned = accounts.create_experiment(project, name, who.name, **found.fields())
            response.status_code, entry.outcome = 201, "ok: created"
        else:
            _idle(who, owned)
            who.server.store.update_ir(owned.experiment.name, **found.fields())
            entry.outcome = "ok: replaced"
    return _reply(who, seen_experiment(who, project, name))


@router.get("/{name}")
def show(project: AccountName, name: ExperimentName, who: Who) -> schemas.ExperimentDetail:
    """The experiment with its IR, runs and the front end's warnings (the portal's page of
    the experiment builds on it: it answers the model, not its JSON)."""
    import json

    seen = seen_experiment(who, project, name)
    owned = seen[1]
    ir = json.loads(owned.experiment.ir_json)
    runs = [schemas.Run_.model_validate(r, from_attributes=True)
            for r in who.server.store.runs(owned.experiment.name)]  # fmt: skip
    warnings = [w.get("message", "") for w in ir.get("warnings", [])]
    return _reply(who, seen, schemas.ExperimentDetail, ir=ir, runs=runs, warnings=warnings)


@router.get("/{name}/status", response_model=schemas.Status)
def status(project: AccountName, name: ExperimentName, who: Who) -> Response:
    """The experiment's state and last operation, what the server itself last did to it or
    warned of (idle warnings and swap-outs, reconciliation), and while it is active its
    controller's status (links with their counters, programs, traffic)."""
    seen = seen_experiment(who, project, name)
    owned = seen[1]
    live = None
    if owned.experiment.state == State.ACTIVE:
        try:
            active = who.server.testbed.active(owned.experiment.name)
            try:
                live = active.status()
                live["nodes"] = [{"node": n.name, "namespace": n.netns} for n in active.plan.nodes]
            finally:
                active.close()
        except (NestbedError, OSError) as exc:
            live = {"error": _said(str(exc), owned)}
    rows = who.server.accounts.audit_log(project, NOTICES, experiment=name, by_server=True)
    notices = [schemas.AuditRow.model_validate(r, from_attributes=True) for r in rows]
    return _json(_reply(who, seen, schemas.Status, live=live, notices=notices,
                        warning=_warning(owned, rows)))  # fmt: skip


@router.post("/{name}/swapin", status_code=202, dependencies=Writes)
def swapin(
    project: AccountName, name: ExperimentName, who: Who, body: schemas.SwapIn | None = None
) -> schemas.Experiment:
    """Starts building the experiment's network and its controller (its run begins)."""
    options = (body or schemas.SwapIn()).model_dump()

    def work(stored: str, placed: RunOptions) -> None:
        who.server.testbed.swap_in(stored, placed).close()

    return _start(who, project, name, "swapin", work, options=options)


@router.post("/{name}/run", status_code=202, dependencies=Writes)
def run(
    project: AccountName, name: ExperimentName, who: Who, body: schemas.Run | None = None
) -> schemas.Experiment:
    """Starts a whole run: swap in, run until its events end (or ``duration_s``), swap out;
    its results stay on the server (see ``show``'s runs)."""
    options = (body or schemas.Run()).model_dump()

    def work(stored: str, placed: RunOptions) -> None:
        whole_run(who.server.testbed, stored, placed)

    return _start(who, project, name, "run", work, options=options)


@router.post("/{name}/swapout", status_code=202, dependencies=Writes)
def swapout(project: AccountName, name: ExperimentName, who: Who) -> schemas.Experiment:
    """Starts ending the run and tearing the network down (results are kept)."""

    def check(owned: OwnedExperiment) -> None:
        if owned.experiment.state in (State.DEFINED, State.SWAPPED):
            raise _not_live(owned)

    def work(stored: str, _placed: RunOptions) -> None:
        who.server.testbed.swap_out(stored)

    return _start(who, project, name, "swapout", work, check)


@router.delete("/{name}", dependencies=Writes)
def delete(project: AccountName, name: ExperimentName, who: Who) -> dict[str, bool]:
    """Deletes the experiment with its history (not while it is swapped in)."""
    with who.audited("delete", project=project, experiment=name):
        owned = owned_experiment(who, project, name)
        _idle(who, owned)
        who.server.store.delete(owned.experiment.name)
        who.server.operations.forget(owned.experiment.name)
    return {"ok": True}


def _may_swap_in(owned: OwnedExperiment) -> None:
    check_transition(owned.experiment.name, owned.experiment.state, State.SWAPPING_IN)


def _start(
    who: Caller, project: str, name: str, kind: str, work: Any, check: Any = _may_swap_in,
    options: dict[str, Any] | None = None,
) -> schemas.Experiment:  # fmt: skip
    """Checks the experiment (``check(owned)``), reserves it for ``kind`` and writes the
    audit row, then starts ``work(stored, placed)`` in a worker (whose end is audited
    after the request's row, always): ``placed`` are the run's options, ``options`` with its
    results folder and the project's identity (``confinement``)."""
    op = None
    try:
        with who.audited(kind, project=project, experiment=name) as entry:
            owned = owned_experiment(who, project, name)
            stored = owned.experiment.name
            check(owned)
            if kind == "swapout":
                op = who.server.operations.reserve(Operation(kind, stored, who.name))
            else:  # it will take the machine's resources: admitted first
                with who.server.admission.admitted(who.server.store, stored):
                    op = who.server.operations.reserve(Operation(kind, stored, who.name))
            entry.outcome = "accepted"
    except BaseException:
        if op is not None:
            who.server.operations.release(op)
        raise
    try:
        placed = confinement.run_options(who.server.accounts, who.server.config, project, name,
                                         **(options or {}))  # fmt: skip
    except BaseException:
        who.server.operations.release(op)
        raise
    who.server.operations.launch(op, lambda: work(op.experiment, placed))
    return _reply(who, seen_experiment(who, project, name))


def _idle(who: Caller, owned: OwnedExperiment) -> None:
    if who.server.operations.busy(owned.experiment.name):
        op = who.server.operations.last(owned.experiment.name)
        raise Busy(
            f"experiment {owned.name!r} is busy with a {op.kind if op else 'change'}; wait "
            "for it to end"
        )


def _not_live(owned: OwnedExperiment) -> NestbedError:
    return UserError(
        f"experiment {owned.name!r} is {owned.experiment.state}, not swapped in; nothing to "
        "swap out"
    )
