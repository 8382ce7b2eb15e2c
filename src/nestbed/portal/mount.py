"""The portal on a server's FastAPI app: its routes under /portal, its static files, and
its errors as HTML pages (the API's stay JSON)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from nestbed.errors import NestbedError
from nestbed.portal.render import HERE, page
from nestbed.portal.session import BadCsrf, LoginNeeded
from nestbed.server.auth import Forbidden, NotFound


def mount(app: FastAPI) -> None:
    from nestbed.portal import pages, terminal

    app.include_router(pages.router)
    app.include_router(terminal.router)  # the web terminal (its page and its WebSocket)
    app.mount("/portal/static", StaticFiles(directory=HERE / "static"), name="portal-static")
    api_error = app.exception_handlers.get(NestbedError)

    async def nestbed_error(request: Request, exc: Exception) -> Response:
        if not _portal(request) and api_error is not None:
            return await api_error(request, exc)
        status = 404 if isinstance(exc, NotFound) else 403 if isinstance(exc, Forbidden) else 409
        return _error(request, status, str(exc))

    async def login_needed(request: Request, _exc: Exception) -> Response:
        if request.headers.get("HX-Request") == "true":
            return Response(status_code=204, headers={"HX-Redirect": "/portal/login"})
        if request.method == "GET" and "text/event-stream" not in request.headers.get("accept", ""):
            return RedirectResponse("/portal/login", status_code=303)
        return _error(request, 401, "Log in first: your session has ended or was never opened.")

    async def bad_csrf(request: Request, _exc: Exception) -> Response:
        return _error(request, 403, "This form is not from this portal's page (its CSRF token "
                      "is missing or wrong); reload the page and send it again.")  # fmt: skip

    app.add_exception_handler(NestbedError, nestbed_error)
    app.add_exception_handler(LoginNeeded, login_needed)
    app.add_exception_handler(BadCsrf, bad_csrf)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/portal/", status_code=307)


def _portal(request: Request) -> bool:
    return request.url.path.startswith("/portal")


def _error(request: Request, status: int, message: str) -> HTMLResponse:
    return page(request, "error.html", status=status, title=f"Error {status}", message=message,
                code=status)  # fmt: skip
