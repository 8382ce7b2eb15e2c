"""The portal's routes: login, the experiments with the batch queue, create (upload or
paste, problems marked at their line before anything is stored), an experiment with its
actions, its topology, its live page and its runs' results.

Every route acts through the API's own functions (``server.experiments``, ``runs``,
``live``) with the session's ``Caller``, so the portal sees and may do exactly what the
same token may through the API: another project's pages are 404 as there. Forms post
normally and are answered with a redirect (303); htmx only swaps the answer in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from nestbed.errors import NestbedError, SpecError, UserError
from nestbed.portal import derived, forms, graph, reports, results
from nestbed.portal.render import page
from nestbed.portal.session import (
    COOKIE,
    CSRF_COOKIE,
    Caller,
    check_csrf,
    keep_csrf,
    new_csrf_seed,
    viewer,
)
from nestbed.server import experiments, live, runs, schemas
from nestbed.server.accounts import AccountName
from nestbed.server.auth import NotFound
from nestbed.server.experiments import ExperimentName, owned_experiment
from nestbed.store import State
from nestbed.store.queue import BatchQueue
from nestbed.store.records import ExperimentRecord

router = APIRouter(prefix="/portal", include_in_schema=False)

Viewer = Annotated[Caller, Depends(viewer)]
E = "/p/{project}/e/{name}"
LIVE_STATES = (State.SWAPPING_IN, State.SWAPPING_OUT)


def base(project: str, name: str) -> str:
    return f"/portal/p/{project}/e/{name}"


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def is_htmx(request: Request) -> bool:
    return request.headers.get("HX-Request") == "true"


# -- login ------------------------------------------------------------------------------------


@router.get("/login")
def login_form(request: Request) -> HTMLResponse:
    return page(request, "login.html", title="Log in")


@router.post("/login")
async def login(request: Request) -> Response:
    form = await forms.read(request)
    check_csrf(request, form.get("csrf"))
    token = form.get("token").strip()
    server = request.app.state.server
    if not token or server.accounts.user_for_token(token) is None:
        return page(request, "login.html", title="Log in", status=401,
                    error="That token is not known to this server (wrong or revoked).")  # fmt: skip
    reply = redirect("/portal/")
    reply.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/portal",
                     secure=request.url.scheme == "https")  # fmt: skip
    new_csrf_seed(request)  # the session's own CSRF token, not the login page's
    keep_csrf(request, reply)
    return reply


@router.post("/logout")
async def logout(request: Request, who: Viewer) -> Response:
    check_csrf(request, (await forms.read(request)).get("csrf"))
    reply = redirect("/portal/login")
    reply.delete_cookie(COOKIE, path="/portal")
    reply.delete_cookie(CSRF_COOKIE, path="/portal")
    return reply


# -- the experiments --------------------------------------------------------------------------


def projects_of(who: Caller) -> list[str]:
    accounts = who.server.accounts
    if who.user.is_admin:
        return [p.name for p in accounts.projects()]
    return [m.project for m in accounts.memberships(who.name)]


def idle_s(who: Caller, stored: str) -> float | None:
    """How long the server's idle policy has seen the experiment idle (None: not known)."""
    for policy in getattr(who.server.loop, "policies", ()):
        state = getattr(policy, "states", {}).get(stored)
        since = getattr(state, "idle_since_s", None)
        if state is not None:
            return max(0.0, time.time() - since) if since else 0.0
    return None


@router.get("/")
def experiment_list(request: Request, who: Viewer) -> HTMLResponse:
    now = datetime.now(UTC)
    rows, queue = [], []
    for project in projects_of(who):
        for owned in who.server.accounts.experiments(project):
            record = owned.experiment
            rows.append({"project": project, "name": owned.name, "owner": owned.creator,
                         "state": record.state, "age_s": (now - record.created_at).total_seconds(),
                         "idle_s": idle_s(who, record.name),
                         "url": base(project, owned.name)})  # fmt: skip
        queue += BatchQueue(who.server.store).entries(project)
    running = any(r["state"] in LIVE_STATES for r in rows)
    return page(request, "experiments.html", who=who, title="Experiments", rows=rows,
                queue=queue, refresh=running)  # fmt: skip


@router.get("/new")
def new_form(request: Request, who: Viewer) -> HTMLResponse:
    return page(request, "new.html", who=who, title="New experiment", projects=projects_of(who),
                form={"file_name": "experiment.ns", "text": ""})  # fmt: skip


@router.post("/new")
async def create(request: Request, who: Viewer) -> Response:
    form = await forms.read(request)
    check_csrf(request, form.get("csrf"))
    project = form.get("project")
    text, file_name = form.get("text"), form.get("file_name").strip()
    upload = form.files.get("file")
    if upload and upload[1]:
        file_name, text = Path(upload[0]).name, upload[1].decode("utf-8", "replace")
    shown = {"project": project, "file_name": file_name, "text": text, "name": form.get("name")}
    problems: list[dict[str, Any]] = []
    try:
        body = schemas.ExperimentFile(file_name=file_name, text=text,
                                      name=form.get("name").strip() or None)  # fmt: skip
        made = experiments.create(project, body, who)
    except SpecError as exc:
        problems = [{"file": p.file, "line": p.line, "message": p.message} for p in exc.problems]
    except NestbedError as exc:
        problems = [{"file": None, "line": None, "message": str(exc)}]
    except ValueError as exc:  # the schema's checks of the file's name and size
        problems = [{"file": None, "line": None, "message": _said(exc)}]
    else:
        return redirect(base(made.project, made.name))
    marks: dict[int, list[str]] = {}
    for p in problems:
        if p["line"] and (p["file"] in (None, file_name)):
            marks.setdefault(p["line"], []).append(p["message"])
    lines = [{"number": i, "text": t, "problems": marks.get(i, [])}
             for i, t in enumerate(text.splitlines(), 1)]  # fmt: skip
    # 200: the form comes back for fixing (a 4xx would be a console error in the browser)
    return page(request, "new.html", who=who, title="New experiment",
                projects=projects_of(who), form=shown, problems=problems, lines=lines)  # fmt: skip


def _said(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors())
    return str(exc)


# -- one experiment ---------------------------------------------------------------------------


@router.get(E)
def experiment(request: Request, project: AccountName, name: ExperimentName,
               who: Viewer) -> HTMLResponse:  # fmt: skip
    seen = experiments.seen_experiment(who, project, name)
    record = seen[1].experiment
    found = derived.definition(record.ir_sha256, record.ir_json)
    # As the API's ``show`` answers, from the definition read once rather than per request.
    shown = experiments._reply(who, seen, schemas.ExperimentDetail, ir={}, runs=[],
                               warnings=found.warnings)  # fmt: skip
    busy = shown.state in LIVE_STATES or (shown.operation and shown.operation.status == "running")
    WARMING.submit(topology_of, who, record)  # its errors are the topology page's to show
    return page(request, "experiment.html", who=who, title=name, e=shown,
                runs=list(reversed(who.server.store.runs(record.name))),
                base=base(project, name), counts=found.counts, refresh=bool(busy),
                sweeps=runs.sweeps(who, project))  # fmt: skip


ACTIONS = {"swapin": experiments.swapin, "swapout": experiments.swapout}


@router.post(E + "/{action}")
async def act(request: Request, project: AccountName, name: ExperimentName, action: str,
              who: Viewer) -> Response:  # fmt: skip
    form = await forms.read(request)
    check_csrf(request, form.get("csrf"))
    if action == "delete":
        experiments.delete(project, name, who)
        return redirect("/portal/")
    if action == "event":
        return await send_event(request, project, name, who, form)
    if action == "positions":
        return save_positions(project, name, who, form)
    if action not in ACTIONS:
        raise NotFound(f"there is no action {action!r}")
    ACTIONS[action](project, name, who)
    return redirect(base(project, name))


# -- topology ---------------------------------------------------------------------------------


def positions_file(who: Caller, stored: str) -> Path:
    """Where the node positions dragged on the topology page are kept: the server's own
    results root, named by the stored name (the store's, never a request's text)."""
    return who.server.config.results_root / ".portal" / "positions" / f"{stored}.json"


def load_positions(who: Caller, stored: str) -> dict[str, dict[str, float]]:
    try:
        found = json.loads(positions_file(who, stored).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def positions_stamp(who: Caller, stored: str) -> tuple[int, int, int] | None:
    """The positions file's identity: a new one (a save replaces it) is read anew."""
    try:
        info = positions_file(who, stored).stat()
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def hosts_of(who: Caller, stored: str, state: str) -> dict[str, str]:
    """The host each node runs on, when swapped in on a cluster (else empty)."""
    if state != State.ACTIVE:
        return {}
    placement = getattr(who.server.testbed.backend, "placement", None)
    if placement is None:
        return {}
    try:  # the live pages' open Active: its plan is read once per swap-in, not per page
        with who.server.actives.of(who.server.testbed, stored) as active:
            kept = placement(active.plan)
    except (NestbedError, OSError):
        return {}
    return dict(kept[0]) if kept else {}


def topology_of(
    who: Caller, record: ExperimentRecord
) -> tuple[derived.Definition, dict[str, str], derived.Topology]:
    """The experiment's definition, its nodes' hosts and its topology (kept, or made)."""
    found = derived.definition(record.ir_sha256, record.ir_json)
    hosts = hosts_of(who, record.name, record.state)
    drawn = derived.topology(record.ir_sha256, found, hosts,
                             lambda: load_positions(who, record.name),
                             positions_stamp(who, record.name))  # fmt: skip
    return found, hosts, drawn


WARMING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="portal-topology")
"""Makes an experiment's topology while its overview page is read, so that the topology
page, likely next, finds it kept (a 1 000-node one is some 70 ms on an idle machine)."""


@router.get(E + "/topology")
def topology(request: Request, project: AccountName, name: ExperimentName, who: Viewer,
             q: str = "") -> HTMLResponse:  # fmt: skip
    owned = owned_experiment(who, project, name)
    found, hosts, drawn = topology_of(who, owned.experiment)
    table = drawn.node_table
    needle = q.strip().lower()
    if needle:
        table = derived.node_table([r for r in drawn.node_rows
                                    if needle in " ".join(r.values()).lower()])  # fmt: skip
    return page(request, "topology.html", who=who, title=f"{name}: topology",
                e=owned, base=base(project, name), elements_json=drawn.elements_json,
                large=found.large, node_table=table, link_rows=found.link_rows, q=q,
                hosts=sorted(set(hosts.values())),
                layout="breadthfirst" if found.large else "cose", preset=drawn.preset)  # fmt: skip


def save_positions(project: str, name: str, who: Caller, form: forms.Form) -> Response:
    owned = owned_experiment(who, project, name)
    keys = derived.definition(owned.experiment.ir_sha256, owned.experiment.ir_json).keys
    try:
        sent = json.loads(form.get("positions") or "{}")
    except ValueError:
        sent = {}
    stored = owned.experiment.name
    kept = {**load_positions(who, stored), **graph.clean_positions(sent, keys)}
    path = positions_file(who, stored)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(kept, f)
    os.replace(f.name, path)
    return Response(status_code=204)


# -- live -------------------------------------------------------------------------------------


LIVE_PIPES = 200
"""The pipes a live page shows at most: a link that is down, then those with drops, then the
busiest (the API's /counters has every one). The controller chooses them, so that a status
of thousands of pipes is not serialised for a page of 200."""
LIVE = live.Pipes(top=LIVE_PIPES)


@router.get(E + "/live")
def live_page(request: Request, project: AccountName, name: ExperimentName, who: Viewer,
              said: str = "") -> HTMLResponse:  # fmt: skip
    now = busiest(live.snapshot(who, project, name, LIVE))
    return page(request, "live.html", who=who, title=f"{name}: live", now=now, said=said,
                base=base(project, name), project=project, name=name)  # fmt: skip


@router.get(E + "/live/stream")
def live_stream(request: Request, project: AccountName, name: ExperimentName,
                who: Viewer) -> Response:  # fmt: skip
    owned_experiment(who, project, name)
    return live.stream(request, lambda: busiest(live.snapshot(who, project, name, LIVE)))


def busiest(now: dict[str, Any]) -> dict[str, Any]:
    """``now`` with at most LIVE_PIPES pipes: the controller's choice, or (a controller
    that answered with all) a link that is down, then drops, then packets out."""
    rows = now.get("counters") or []
    now.setdefault("pipes_total", len(rows))
    if len(rows) > LIVE_PIPES:
        rows = sorted(rows, key=lambda r: (r.get("state") == "up", -r["drops"],
                                           -(r.get("packets_out") or 0)))[:LIVE_PIPES]  # fmt: skip
        now["counters"] = sorted(rows, key=lambda r: (r["link"], str(r.get("port")),
                                                      str(r.get("direction"))))  # fmt: skip
    return now


async def send_event(request: Request, project: str, name: str, who: Caller,
                     form: forms.Form) -> Response:  # fmt: skip
    try:
        reply = live.send_event(who, project, name, live.Event(text=form.get("text")))
        row = reply.get("event")
        said = (f"done at {float(row['actual_s']):.3f} s: {row['message'] or 'ok'}" if row
                else f"scheduled at {reply.get('scheduled_s')} s")  # fmt: skip
        ok = True
    except NestbedError as exc:
        said, ok = str(exc), False
    if is_htmx(request):
        return page(request, "event_result.html", said=said, ok=ok)
    from urllib.parse import quote

    return redirect(f"{base(project, name)}/live?said={quote(said)}")


# -- results ----------------------------------------------------------------------------------


@router.get(E + "/runs/{run_id}")
def run_page(
    request: Request, project: AccountName, name: ExperimentName, run_id: int, who: Viewer,
    table: str = "", sort: str = "", desc: int = 0,
) -> HTMLResponse:  # fmt: skip
    run = runs.run_of(who, project, name, run_id)
    shown = results.view(run, table, sort, bool(desc))
    url = f"{base(project, name)}/runs/{run_id}"
    head, cut = results.report_head(shown["report_text"])
    report = results.report_html(head, url + "/files")
    if cut:  # the whole report is rendered meanwhile, to be there when asked for
        with contextlib.suppress(OSError):
            reports.start(reports_cache(who), runs.folder_of(run).report)
    drawing = ((shown["manifest"] or {}).get("report") or {}).get("state") == "drawing"
    return page(request, "run.html", who=who, title=f"{name}: run {run_id}", run=shown,
                base=base(project, name), url=url, name=name, report_html=report,
                report_cut=cut, report_bytes=len(shown["report_text"].encode()),
                drawing=drawing, refresh=drawing or run.ended_at is None)  # fmt: skip


def reports_cache(who: Caller) -> Path:
    """Where the runs' whole reports are kept as HTML: the server's own results root."""
    return who.server.config.results_root / ".portal" / "reports"


@router.get(E + "/runs/{run_id}/report")
def whole_report(request: Request, project: AccountName, name: ExperimentName, run_id: int,
                 who: Viewer) -> HTMLResponse:  # fmt: skip
    """The whole report (the run's page renders its first part): swapped into the run's
    page by htmx, or a page of its own."""
    run = runs.run_of(who, project, name, run_id)
    path = runs.folder_of(run).report
    try:
        written = path.stat().st_size > 0
    except OSError:
        written = False
    if not written:
        raise NotFound(f"run {run_id} of {name!r} has no report")
    html = reports.whole(reports_cache(who), path)
    url = f"{base(project, name)}/runs/{run_id}"
    report = results.with_files(html, url + "/files")
    if is_htmx(request):
        return page(request, "report.html", report_html=report)
    return page(request, "run_report.html", who=who, title=f"{name}: run {run_id}: report",
                base=base(project, name), url=url, name=name, run_id=run_id,
                report_html=report)  # fmt: skip


@router.post(E + "/runs/{run_id}/report")
async def draw_report(request: Request, project: AccountName, name: ExperimentName, run_id: int,
                      who: Viewer) -> Response:  # fmt: skip
    """Draws the run's report now (``nestbed report``), not waiting for the detached drawing
    queued behind the machine's other runs."""
    from nestbed.results.drawing import draw

    check_csrf(request, (await forms.read(request)).get("csrf"))
    run = runs.run_of(who, project, name, run_id)
    if run.ended_at is None:
        raise UserError(f"run {run_id} of {name!r} has not ended; its report comes at its end")
    folder = runs.folder_of(run).root
    if not folder.is_dir() or folder.is_symlink():
        raise NotFound(f"run {run_id} of {name!r} has no folder on the server any more")
    await asyncio.to_thread(draw, folder)
    return redirect(f"{base(project, name)}/runs/{run_id}#report")


@router.get(E + "/runs/{run_id}/files/{path:path}")
def run_file(project: AccountName, name: ExperimentName, run_id: int, path: str,
             who: Viewer) -> Response:  # fmt: skip
    return runs.run_file(project, name, run_id, path, who)


@router.get(E + "/runs/{run_id}/download")
def run_download(project: AccountName, name: ExperimentName, run_id: int,
                 who: Viewer) -> Response:  # fmt: skip
    return runs.download(project, name, run_id, who)


@router.get(E + "/runs/{run_id}/pcaps")
def run_pcaps(project: AccountName, name: ExperimentName, run_id: int,
              who: Viewer) -> Response:  # fmt: skip
    return runs.download_pcaps(project, name, run_id, who)


SweepName = Annotated[str, PathParam(pattern=runs.SWEEP_NAME)]


@router.get("/p/{project}/sweeps/{sweep_name}")
def sweep_page(request: Request, project: AccountName, sweep_name: SweepName,
               who: Viewer) -> HTMLResponse:  # fmt: skip
    shown = runs.sweep(who, project, sweep_name)
    return page(request, "sweep.html", who=who, title=f"sweep {sweep_name}", sweep=shown,
                project=project)  # fmt: skip


@router.get("/p/{project}/sweeps/{sweep_name}/files/{path:path}")
def sweep_file(project: AccountName, sweep_name: SweepName, path: str, who: Viewer) -> Response:
    return runs.sweep_file(project, sweep_name, path, who)
