"""The API of a swapped-in experiment while it runs: send it an event (Emulab's tevc:
``bottleneck delay 50ms``, ``link0 down``), read its link counters, and follow them as
server-sent events (one snapshot a second, with each pipe's throughput since the last one).

Everything goes through the life cycle's ``Active`` (the experiment's controller); a
snapshot is the controller's status cut to what a page shows, plus the run's newest
events.csv rows. Sending an event is audited like every other change.
"""

from __future__ import annotations

import asyncio
import csv
import json
import shlex
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from nestbed.errors import NestbedError, UserError
from nestbed.results.folder import RunFolder
from nestbed.server.accounts import AccountName
from nestbed.server.auth import Caller, Invalid, Who
from nestbed.server.experiments import ExperimentName, owned_experiment
from nestbed.store import State

router = APIRouter(prefix="/v1/projects/{project}/experiments/{name}", tags=["live"])

EVENT_ROWS = 50  # the newest rows of the run's event log a snapshot carries
STREAM_PERIOD_S = 1.0  # the link counters are sampled each second by the controller too


class Event(BaseModel):
    """An event for a live experiment: ``text`` as the CLI takes it (``[+SECONDS] OBJECT VERB
    [ARGS...]``), or its parts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str | None = Field(default=None, max_length=500)
    object: str | None = Field(default=None, max_length=100)
    verb: str | None = Field(default=None, max_length=100)
    args: list[str] = Field(default_factory=list, max_length=20)
    after_s: float = Field(default=0, ge=0, le=7 * 24 * 3600)

    def parts(self) -> tuple[str, str, list[str], float]:
        """(object, verb, args, after_s); ``Invalid`` naming what is missing."""
        if self.text is None:
            if not self.object or not self.verb:
                raise Invalid("an event needs its object and verb, e.g. link0 down")
            return self.object, self.verb, list(self.args), self.after_s
        try:
            words = shlex.split(self.text)
        except ValueError as exc:
            raise Invalid(f"the event {self.text!r} is not words ({exc})") from None
        after = self.after_s
        if words and words[0].startswith("+"):
            try:
                after = float(words[0][1:])
            except ValueError:
                raise Invalid(f"{words[0]!r} is not a time; write +SECONDS, e.g. +2.5") from None
            words = words[1:]
        if len(words) < 2:
            raise Invalid("an event is OBJECT VERB [ARGS...], for example: link0 down")
        return words[0], words[1], words[2:], after


def _active(who: Caller, project: str, name: str) -> Any:
    owned = owned_experiment(who, project, name)
    if owned.experiment.state != State.ACTIVE:
        raise UserError(
            f"experiment {name!r} is {owned.experiment.state}, not swapped in; swap it in first"
        )
    return who.server.testbed.active(owned.experiment.name)


def send_event(who: Caller, project: str, name: str, event: Event) -> dict[str, Any]:
    """Sends ``event`` now (or later); the controller's reply (its events.csv row, or when
    it is scheduled). An event the controller refuses or that fails is a ``UserError``."""
    obj, verb, args, after = event.parts()
    said = " ".join([obj, verb, *args])
    with who.audited("event", project=project, experiment=name) as entry:
        active = _active(who, project, name)
        try:
            reply = active.event(obj, verb, args, after_s=after)
        finally:
            active.close()
        row = reply.get("event")
        if row is not None and row.get("outcome") != "ok":
            raise UserError(f"event {said} failed: {row.get('message')}")
        entry.outcome = f"ok: {said}"
    reply.pop("ok", None)
    return reply


@dataclass(frozen=True)
class Pipes:
    """Which pipes' counters a snapshot carries: those of ``links`` (all without), at most
    ``top`` of them (the controller's choice: down, dropping, busiest)."""

    links: tuple[str, ...] | None = None
    top: int | None = None

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in (("links", self.links), ("top", self.top)) if v is not None}


ALL_PIPES = Pipes()


def controller_status(active: Any, pipes: Pipes) -> dict[str, Any]:
    """The controller's status with the counters of ``pipes`` only. A controller started
    before status requests took a choice of pipes refuses one: it is asked for all."""
    fields = pipes.fields()
    if fields:
        try:
            reply = active.request("status", **fields)
            reply.pop("ok", None)
            return dict(reply)
        except UserError:
            pass
    return dict(active.status())


def snapshot(who: Caller, project: str, name: str, pipes: Pipes = ALL_PIPES) -> dict[str, Any]:
    """The experiment now: its state and, while it is active, its run's time, link states,
    the counters of ``pipes`` (with ``pipes_total``, how many the experiment has),
    programs, flows and newest events."""
    owned = owned_experiment(who, project, name)
    stored = owned.experiment.name
    found: dict[str, Any] = {"state": owned.experiment.state, "at": time.time()}
    if owned.experiment.state != State.ACTIVE:
        who.server.actives.forget(stored)
        return found
    try:
        with who.server.actives.of(who.server.testbed, stored) as active:
            status = controller_status(active, pipes)
    except (NestbedError, OSError) as exc:
        return {**found, "error": str(exc)}
    counters = status.get("link_counters") or []
    for row in counters:
        row["drops"] = int(row.get("drops") or 0)
    found.update({
        "elapsed_s": status.get("elapsed_s"), "finished": status.get("finished"),
        "run_id": status.get("run_id"), "links": status.get("links", {}),
        "counters": counters, "pipes_total": status.get("pipes_total", len(counters)),
        "programs": status.get("programs", []),
        "flows": status.get("flows", []), "upcoming": status.get("upcoming", []),
        "events": recent_events(Path(status["results"])) if status.get("results") else [],
    })  # fmt: skip
    return found


def recent_events(root: Path, count: int = EVENT_ROWS) -> list[dict[str, str]]:
    """The newest ``count`` rows of the run's events.csv, newest first."""
    try:
        with RunFolder(root).events.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    return rows[-count:][::-1]


def with_throughput(now: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """``now`` with each pipe's ``throughput_bps`` (bytes out since ``before``, as bits per
    second of the run's time) and ``drops_new`` (drops since ``before``)."""
    if before is None or not now.get("counters") or not before.get("counters"):
        return now
    dt = (now.get("elapsed_s") or 0) - (before.get("elapsed_s") or 0)
    old = {(r["link"], r.get("port"), r.get("direction")): r for r in before["counters"]}
    for row in now["counters"]:
        prior = old.get((row["link"], row.get("port"), row.get("direction")))
        if prior is None or dt <= 0:
            continue
        sent = (row.get("bytes_out") or 0) - (prior.get("bytes_out") or 0)
        row["throughput_bps"] = max(0.0, sent * 8 / dt)
        row["drops_new"] = row["drops"] - int(prior.get("drops") or 0)
    return now


async def snapshots(
    request: Request, take: Callable[[], dict[str, Any]], period_s: float = STREAM_PERIOD_S
) -> AsyncIterator[str]:
    """Server-sent events: a ``snapshot`` each ``period_s`` while the experiment is active
    and the client listens, then one ``end`` event."""
    before = None
    while not await request.is_disconnected():
        now = with_throughput(await asyncio.to_thread(take), before)
        if now["state"] != State.ACTIVE:
            yield f"event: end\ndata: {json.dumps(now, default=str)}\n\n"
            return
        yield f"event: snapshot\ndata: {json.dumps(now, default=str)}\n\n"
        before = now
        await asyncio.sleep(period_s)


def stream(request: Request, take: Callable[[], dict[str, Any]]) -> StreamingResponse:
    return StreamingResponse(snapshots(request, take), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store"})  # fmt: skip


@router.post("/events")
def event(project: AccountName, name: ExperimentName, body: Event, who: Who) -> dict[str, Any]:
    """Sends an event to the running experiment (``{"text": "bottleneck delay 50ms"}`` or
    ``{"object": "link0", "verb": "down"}``); 409 if it is not swapped in or the event
    fails."""
    return send_event(who, project, name, body)


Links = Annotated[list[str] | None, Query(max_length=1000)]
Top = Annotated[int | None, Query(ge=1)]


def chosen(link: list[str] | None, top: int | None) -> Pipes:
    return Pipes(links=tuple(link) if link else None, top=top)


@router.get("/counters")
def counters(project: AccountName, name: ExperimentName, who: Who, link: Links = None,
             top: Top = None) -> dict[str, Any]:  # fmt: skip
    """The experiment now: link states and counters per pipe (packets and bytes out, drops,
    queue), programs, flows and the newest events. ``?link=NAME`` (repeated) keeps those
    links' pipes only; ``?top=N`` the N that matter most (down, dropping, busiest in the
    last second); ``pipes_total`` says how many there are."""
    return snapshot(who, project, name, chosen(link, top))


@router.get("/counters/stream")
def counters_stream(project: AccountName, name: ExperimentName, who: Who, request: Request,
                    link: Links = None, top: Top = None) -> StreamingResponse:  # fmt: skip
    """The same, as server-sent events each second (``snapshot``; ``end`` once the
    experiment is no longer active), each pipe with its ``throughput_bps``."""
    owned_experiment(who, project, name)
    pipes = chosen(link, top)
    return stream(request, lambda: snapshot(who, project, name, pipes))
