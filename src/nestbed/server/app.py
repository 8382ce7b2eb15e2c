"""The FastAPI application of ``nestbed serve``: what the server owns, how it starts and
stops, and how nestbed's errors become HTTP replies.

On start the server opens the store (migrating it), builds the ``Testbed`` on the back end
``nestbed.backend.get`` chooses ($NESTBED_BACKEND), reconciles what the store says is live
with what still lives (``loop.reconcile``), and only then answers; its background loop ticks
while it runs. On stop the loop ends, running runs end as interrupted (keeping their
results), swap-ins and swap-outs finish, and the store is closed.

Errors: ``NotFound`` 404, ``Forbidden`` 403, a bad experiment file 422 with each problem's
file and line, ``TooMany`` (a user's sessions over the limit) 429, ``Busy`` and other
refusals (``UserError``) 409, ``EnvironmentProblem`` 503,
``InternalError`` 500; every reply is ``{"detail": ...}``. Request bodies are limited to
``MAX_BODY_BYTES`` (413).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from nestbed import __version__
from nestbed.errors import EnvironmentProblem, InternalError, NestbedError, SpecError
from nestbed.lifecycle import Testbed
from nestbed.server import confinement, priority
from nestbed.server.actives import Actives
from nestbed.server.auth import Forbidden, Invalid, NotFound, TooMany, Who
from nestbed.server.config import MAX_BODY_BYTES, ServerConfig
from nestbed.server.idle import Sessions
from nestbed.server.loop import Loop, reconcile
from nestbed.server.operations import Operation, Operations
from nestbed.server.policies import Admission, BatchRunner, IdleSwapOut, capacity_of
from nestbed.server.session_limit import UserSessions
from nestbed.server.timing import Timing, Timings
from nestbed.store import Store
from nestbed.store.accounts import Accounts, users_text
from nestbed.store.db import use_wal

log = logging.getLogger("nestbed.server")


@dataclass
class Server:
    """Everything one server owns, shared by its requests, workers and loop."""

    config: ServerConfig
    store: Store
    accounts: Accounts
    testbed: Testbed
    operations: Operations
    loop: Loop
    admission: Admission
    sessions: Sessions  # exec and shell sessions open (``sessions``), seen by idle swap-out
    actives: Actives = field(default_factory=Actives)  # the live pages' experiments, open
    # each user's sessions open, under config.max_sessions (``session_limit``)
    user_sessions: UserSessions = field(default_factory=UserSessions)

    @classmethod
    def open(cls, config: ServerConfig) -> Server:
        """Opens the store and the back end and reconciles them."""
        from nestbed.backend import get

        capacity = capacity_of(config.hosts)  # a bad --hosts stops the server at once
        store = Store.open(config.store)
        try:
            use_wal(store.engine)  # reads go on while operations and the loop write
            accounts = Accounts(store)
            confinement.protect(store, config.results_root)
            testbed = Testbed(store, get())
            found = reconcile(testbed, accounts)
            log.info("reconciled: settled %s, spared %s", found["settled"], found["spared"])
        except BaseException:
            store.close()
            raise
        operations = Operations(lambda op: _audit_done(accounts, op))
        admission = Admission(operations, capacity)
        sessions = Sessions()
        policies = (BatchRunner(admission, config),
                    IdleSwapOut(config.idle, sessions))  # fmt: skip
        loop = Loop(testbed, accounts, operations, config.tick_s, policies=policies)
        return cls(config, store, accounts, testbed, operations, loop, admission, sessions)

    def close(self) -> None:
        self.operations.stop()
        self.actives.close()
        self.store.close()


def _audit_done(accounts: Accounts, op: Operation) -> None:
    owner = accounts.owner(op.experiment)
    project, name = (owner.project, owner.name) if owner else (None, op.experiment)
    outcome = "done" if op.error is None else f"failed: {users_text(op.error, project, name)}"
    try:
        accounts.audit(op.actor, f"{op.kind}.end", outcome, project=project, experiment=name)
    except NestbedError:
        log.exception("could not audit the end of %s of %s", op.kind, op.experiment)


def create_app(config: ServerConfig) -> FastAPI:
    """The API, serving the store and machine ``config`` names once started."""
    from nestbed.portal import mount
    from nestbed.server import accounts, batches, exemptions, experiments, live, runs, settings
    from nestbed.server import sessions as node_sessions

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        priority.serve_ahead()  # first: the threads started from here on inherit it
        server = await asyncio.to_thread(Server.open, config)
        app.state.server = server
        ticking = asyncio.create_task(server.loop.run())
        try:
            yield
        finally:
            ticking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticking
            await asyncio.to_thread(server.close)
            app.state.timings.log_summary()

    app = FastAPI(
        title="nestbed",
        version=__version__,
        description="A shared nestbed testbed: projects, their experiments, and the audit log.",
        lifespan=lifespan,
    )
    app.include_router(accounts.router)
    app.include_router(experiments.router)
    app.include_router(batches.router)
    app.include_router(runs.router)
    app.include_router(live.router)
    app.include_router(settings.router)
    app.include_router(exemptions.router)
    app.include_router(node_sessions.router)  # exec and shell in nodes (WebSocket)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    timings = Timings()
    app.state.timings = timings
    app.add_middleware(Timing, timings=timings)  # the outermost: it times everything
    app.add_exception_handler(NestbedError, _error_reply)
    app.add_exception_handler(RequestValidationError, _malformed_reply)

    @app.get("/v1/server/timings", tags=["server"])
    def server_timings(who: Who) -> list[dict[str, Any]]:
        """Each route's requests and their time inside the server (``server.timing``),
        since it started (admins only)."""
        who.admin("read the server's timings")
        return timings.summary()

    mount(app)  # the web portal, under /portal

    @app.get("/v1/health", tags=["server"])
    def health() -> dict[str, Any]:
        """Whether the server answers (no token needed)."""
        return {"ok": True, "version": __version__}

    return app


_STATUS: tuple[tuple[type[NestbedError], int], ...] = (
    (NotFound, 404),
    (Forbidden, 403),
    (SpecError, 422),
    (Invalid, 422),
    (TooMany, 429),
    (EnvironmentProblem, 503),
    (InternalError, 500),
    (NestbedError, 409),
)


def status_of(exc: NestbedError) -> int:
    """The HTTP status of one of nestbed's errors (the module's docstring)."""
    return next(code for kind, code in _STATUS if isinstance(exc, kind))


async def _error_reply(_request: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)  # type: ignore[arg-type]
    body: dict[str, Any] = {"detail": str(exc)}
    if isinstance(exc, SpecError):
        body["problems"] = [{"file": p.file, "line": p.line, "message": p.message}
                            for p in exc.problems]  # fmt: skip
    if status >= 500:
        log.error("%s: %s", type(exc).__name__, exc)
    return JSONResponse(body, status_code=status)


ACTIONS = {"submit": "batch.submit", "cancel": "batch.cancel", "ask": "exemption.ask",
           "grant": "exemption.grant", "refuse": "exemption.refuse",
           "change": "settings.set"}  # fmt: skip
"""The audit action of a route whose handler's name is not its action."""


async def _malformed_reply(request: Request, exc: Exception) -> JSONResponse:
    """A request FastAPI's validation refused (422): one sentence naming each bad field,
    the list as ``errors``; audited when it names a project the caller is in (and, if it
    names one of its experiments, that experiment), as a request that reached its handler
    and was refused would be."""
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    said = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()) if x != 'body') or 'body'}: "
                     f"{e.get('msg')}" for e in errors)  # fmt: skip
    detail = f"the request is malformed: {said}"
    await run_in_threadpool(_audit_malformed, request, detail)
    return JSONResponse({"detail": detail, "errors": jsonable_encoder(errors)}, status_code=422)


def _audit_malformed(request: Request, detail: str) -> None:
    server: Server | None = getattr(request.app.state, "server", None)
    route = request.scope.get("route")
    params = request.path_params
    project = params.get("project")
    header = request.headers.get("authorization", "")
    if (
        server is None
        or route is None
        or project is None
        or not header.lower().startswith("bearer ")
    ):
        return  # nothing to say of whom or of what
    try:
        user = server.accounts.user_for_token(header[7:].strip())
        if user is None or not (user.is_admin or server.accounts.role(project, user.name)):
            return  # a stranger's: the project's log is not theirs to write in
        name = params.get("name")
        if name is not None and server.accounts.experiment(project, name) is None:
            name = None  # no such experiment: the row names the project only
        action = getattr(route.endpoint, "__name__", "request")
        server.accounts.audit(user.name, ACTIONS.get(action, action), f"refused: {detail}",
                              project=project, experiment=name)  # fmt: skip
    except NestbedError:
        log.exception("could not audit a malformed request to %s", request.url.path)


class TooLarge(HTTPException):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is larger than the limit of {max_bytes} bytes")


class BodyLimit:
    """Refuses a request body larger than ``max_bytes`` (413), by its Content-Length or,
    when chunked, as it arrives, before it is all in memory."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            reply = JSONResponse({"detail": TooLarge(self.max_bytes).detail}, status_code=413)
            await reply(scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise TooLarge(self.max_bytes)  # FastAPI passes HTTPExceptions on as replies
            return message

        await self.app(scope, limited, send)
