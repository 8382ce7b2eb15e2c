"""Exec and shell sessions in a node of a live experiment, through the server: what
`nestbed exec --server` and `nestbed shell --server` and the portal's web terminal use, so
a user without root reaches their nodes on a shared machine.

One WebSocket per session, ``/v1/projects/{project}/experiments/{name}/nodes/{node}/session``:

* **Who.** A bearer token (``Authorization: Bearer TOKEN``: the CLI), or the portal's
  session cookie, accepted only from a page of this server: a browser sends no CSRF header
  on a WebSocket, so its ``Origin`` must be the server's own (``Host``); a page of another
  site is refused (403) before anything opens. Then the caller and the experiment are
  checked as on every route (``owned_experiment``: a project the caller is not in is 404),
  then the caller's sessions open, across all their projects, against the server's limit
  (``session_limit``, ``--max-sessions``: 429 over it, before anything starts), and the
  session is audited (``session``, with the command or its refusal; ``session.end``, with
  its exit).
* **How it runs.** Exactly as the experiment's programs on this server: in the node's
  namespace and cgroup, as the project's identity through ``setpriv`` (no groups, no
  capabilities, no new privileges; ``backend.confine.user_command``, the controller's code for
  its programs too), with the environment cut to what programs get and ``HOME`` the node's
  working folder of the current run. A trusted project's sessions run as root, as its
  programs do.
* **Protocol.** The client's first message is JSON text (``Start``): ``argv`` (none: the
  node's shell), ``tty`` (a pty, for a shell), ``cols``/``rows``, ``term`` and
  ``timeout_s``. Then its binary messages are the command's input, and its text messages
  JSON: ``{"resize": [COLS, ROWS]}``, ``{"eof": true}``. The server sends binary messages
  of one byte of stream (1 stdout, 2 stderr; a pty has only 1) then the bytes, and ends
  with one text message: ``{"exit": STATUS}`` (128 + N for signal N, like a shell; with
  ``"timed_out": true`` after ``timeout_s``) or ``{"error": SENTENCE, "status": HTTP
  STATUS}`` when the session could not start.

While a session is open (and until the next sample after it ends) the experiment is not idle
(``idle.Sessions``). A session's processes end with it: its process group is killed when the
command exits, the client goes away, or the timeout passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.results.folder import RunFolder
from nestbed.server import confinement
from nestbed.server.accounts import AccountName
from nestbed.server.auth import Caller, Invalid, server_of
from nestbed.server.experiments import ExperimentName, owned_experiment
from nestbed.server.session_limit import Place
from nestbed.server.sessions_io import Process, Start, Target, run
from nestbed.store import State

router = APIRouter(tags=["sessions"])
PATH = "/v1/projects/{project}/experiments/{name}/nodes/{node}/session"

START_WAIT_S = 30.0  # how long the server waits for the first message


class Refused(Exception):
    """A session refused before its WebSocket is accepted (an HTTP reply)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def caller_of(websocket: WebSocket) -> Caller:
    """The session's user: its bearer token, else its portal session from a page of this
    server; ``Refused`` otherwise."""
    from nestbed.portal.session import COOKIE

    server = server_of(websocket)  # type: ignore[arg-type]
    given = websocket.headers.get("authorization")
    if given is not None:
        scheme, _, token = given.partition(" ")
        user = server.accounts.user_for_token(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise Refused(401, "the token is not known to this server (wrong or revoked)")
        return Caller(user=user, server=server)
    cookie = websocket.cookies.get(COOKIE)
    if not cookie:
        raise Refused(401, "a session needs a bearer token (Authorization: Bearer TOKEN) or "
                      "the portal's login")  # fmt: skip
    if not same_origin(websocket.headers.get("origin"), websocket.headers.get("host"),
                       websocket.url.scheme):  # fmt: skip
        raise Refused(403, "a terminal opens only from this server's own portal pages")
    user = server.accounts.user_for_token(cookie)
    if user is None:
        raise Refused(401, "your portal session has ended; log in again")
    return Caller(user=user, server=server)


def same_origin(origin: str | None, host: str | None, scheme: str) -> bool:
    """Whether a browser's ``Origin`` is the server it asks (scheme and host:port)."""
    if not origin or not host:
        return False
    parts = urlsplit(origin)
    wanted = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return parts.scheme == wanted and parts.netloc.lower() == host.lower()


def target(who: Caller, project: str, name: str, node: str) -> Target:
    """The session's node, after the checks of every route (``owned_experiment``); a
    ``UserError`` if the experiment is not swapped in or has no such node."""
    owned = owned_experiment(who, project, name)
    if owned.experiment.state != State.ACTIVE:
        raise UserError(
            f"experiment {name!r} is {owned.experiment.state}, not swapped in; swap it in first"
        )
    server, stored = who.server, owned.experiment.name
    with server.actives.of(server.testbed, stored) as active:
        active.node(node)
        try:
            results = active.status().get("results")
        except (NestbedError, OSError):
            results = None  # a controller gone: the session still runs in the node
    run_as = confinement.runs_as(server.accounts, server.config, project)
    home = RunFolder(Path(results)).work(node) if results else None
    if home is None or not home.is_dir():
        return Target(stored, node, run_as, Path("/"))
    # The node's working folder of the run: on a cluster its host has its own, in which the
    # command starts (the back end is told which folder that is).
    server.testbed.backend.work_folder(home, run_as)
    return Target(stored, node, run_as, home)


@router.websocket(PATH)
async def session(websocket: WebSocket, project: AccountName, name: ExperimentName,
                  node: str) -> None:  # fmt: skip
    """An exec or shell session in the node (module docstring)."""
    try:
        who = await asyncio.to_thread(caller_of, websocket)
    except Refused as exc:
        await _deny(websocket, exc.status, exc.detail)
        return
    await websocket.accept()
    place = who.server.user_sessions.place(who.name)  # taken in _open, under the limit
    try:
        await _carried(websocket, who, project, name, node, place)
    finally:
        place.give_back()  # however the session ended (a no-op if _open gave it back)


async def _carried(websocket: WebSocket, who: Caller, project: str, name: str, node: str,
                   place: Place) -> None:  # fmt: skip
    try:
        start = await _start_message(websocket)
        where, process = await asyncio.to_thread(_open, who, project, name, node, start, place)
    except NestbedError as exc:
        from nestbed.server.app import status_of

        await _end(websocket, {"error": str(exc), "status": status_of(exc)})
        return
    except WebSocketDisconnect:
        return
    began = time.monotonic()
    ended: dict[str, Any] = {}
    try:
        with who.server.sessions.opened(where.stored):
            ended = await run(websocket, process, start.timeout_s)
    finally:
        await asyncio.to_thread(process.close)
        # Free before its end is audited and told: a client that saw either may open the next.
        place.give_back()
        outcome = (f"node {node}: {start.said()}: exit {ended.get('exit')}"
                   f"{' (timed out)' if ended.get('timed_out') else ''}"
                   f"{' (the client left)' if ended.get('gone') else ''} after "
                   f"{time.monotonic() - began:.1f} s")  # fmt: skip
        await asyncio.to_thread(who.server.accounts.audit, who.name, "session.end", outcome,
                                project=project, experiment=name)  # fmt: skip
    if not ended.get("gone"):
        ended.pop("gone", None)
        await _end(websocket, ended)


async def _start_message(websocket: WebSocket) -> Start:
    try:
        text = await asyncio.wait_for(websocket.receive_text(), START_WAIT_S)
    except TimeoutError:
        raise Invalid(f"no start message within {START_WAIT_S:g} s") from None
    except KeyError:  # a binary first message
        raise Invalid("the first message must be JSON text naming the command") from None
    try:
        return Start.model_validate_json(text)
    except ValidationError as exc:
        said = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}"
                         for e in exc.errors())  # fmt: skip
        raise Invalid(f"the start message is not valid: {said}") from None


def _open(who: Caller, project: str, name: str, node: str, start: Start,
          place: Place) -> tuple[Target, Process]:  # fmt: skip
    """The checks of every route, then the user's place under the server's session limit,
    audited with the command; then the command, started (the place given back if not)."""
    with who.audited("session", project=project, experiment=name) as entry:
        where = target(who, project, name, node)
        place.take(who.server.config.max_sessions)
        entry.outcome = f"ok: node {node}: {start.said()}"
        try:
            return where, Process(who, where, start)
        except BaseException as exc:
            place.give_back()  # before the refusal is told: the client may try again at once
            if isinstance(exc, OSError):  # the machine's tools (setpriv, setsid, ip) or limits
                raise EnvironmentProblem(f"cannot start {start.said()} in node {node} "
                                         f"({exc})") from exc  # fmt: skip
            raise


async def _deny(websocket: WebSocket, status: int, detail: str) -> None:
    """An HTTP reply instead of the WebSocket (a close with the reason where the server
    cannot send one)."""
    try:
        await websocket.send_denial_response(JSONResponse({"detail": detail}, status_code=status))
    except RuntimeError:
        await websocket.close(code=1008, reason=detail[:120])


async def _end(websocket: WebSocket, last: dict[str, Any]) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await websocket.send_text(json.dumps(last))
        await websocket.close()
