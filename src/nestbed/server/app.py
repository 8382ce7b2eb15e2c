"""The FastAPI application of ``nestbed serve``: what the server owns, how it starts and
stops, and how nestbed's errors become HTTP replies.

On start the server opens the store (migrating it), builds the ``Testbed`` on the back end
``nestbed.backend.get`` chooses ($NESTBED_BACKEND), reconciles what the store says is live
with what still lives (``loop.reconcile``), and only then answers; its background loop ticks
while it runs. On stop the loop ends, running runs end as interrupted (keeping their
results), swap-ins and swap-outs finish, and the store is closed.

Errors: ``NotFound`` 404, ``Forbidden`` 403, a bad experiment file 422 with each problem's
file and line, ``Busy`` and other refusals (``UserError``) 409, ``EnvironmentProblem`` 503,
``InternalError`` 500; every reply is ``{"detail": ...}``. Request bodies are limited to
``MAX_BODY_BYTES`` (413).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from nestbed import __version__
from nestbed.errors import EnvironmentProblem, InternalError, NestbedError, SpecError
from nestbed.lifecycle import Testbed
from nestbed.server.auth import Forbidden, Invalid, NotFound
from nestbed.server.config import MAX_BODY_BYTES, ServerConfig
from nestbed.server.loop import Loop, reconcile
from nestbed.server.operations import Operation, Operations
from nestbed.server.policies import Admission, BatchRunner, IdleSwapOut
from nestbed.store import Store
from nestbed.store.accounts import Accounts

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

    @classmethod
    def open(cls, config: ServerConfig) -> Server:
        """Opens the store and the back end and reconciles them."""
        from nestbed.backend import get

        store = Store.open(config.store)
        try:
            accounts = Accounts(store)
            testbed = Testbed(store, get())
            found = reconcile(testbed, accounts)
            log.info("reconciled: settled %s, spared %s", found["settled"], found["spared"])
        except BaseException:
            store.close()
            raise
        operations = Operations(lambda op: _audit_done(accounts, op))
        admission = Admission(operations)
        policies = (BatchRunner(admission, config.results_root), IdleSwapOut(config.idle))
        loop = Loop(testbed, accounts, operations, config.tick_s, policies=policies)
        return cls(config, store, accounts, testbed, operations, loop, admission)

    def close(self) -> None:
        self.operations.stop()
        self.store.close()


def _audit_done(accounts: Accounts, op: Operation) -> None:
    owner = accounts.owner(op.experiment)
    project, name = (owner.project, owner.name) if owner else (None, op.experiment)
    outcome = "done" if op.error is None else f"failed: {op.error}"
    try:
        accounts.audit(op.actor, f"{op.kind}.end", outcome, project=project, experiment=name)
    except NestbedError:
        log.exception("could not audit the end of %s of %s", op.kind, op.experiment)


def create_app(config: ServerConfig) -> FastAPI:
    """The API, serving the store and machine ``config`` names once started."""
    from nestbed.portal import mount
    from nestbed.server import accounts, batches, experiments, live, runs

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
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
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.add_exception_handler(NestbedError, _error_reply)
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
    (EnvironmentProblem, 503),
    (InternalError, 500),
    (NestbedError, 409),
)


async def _error_reply(_request: Request, exc: Exception) -> JSONResponse:
    status = next(code for kind, code in _STATUS if isinstance(exc, kind))
    body: dict[str, Any] = {"detail": str(exc)}
    if isinstance(exc, SpecError):
        body["problems"] = [{"file": p.file, "line": p.line, "message": p.message}
                            for p in exc.problems]  # fmt: skip
    if status >= 500:
        log.error("%s: %s", type(exc).__name__, exc)
    return JSONResponse(body, status_code=status)


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
