"""Who is asking, and what they may see.

Every request but ``/v1/health`` and the OpenAPI schema carries ``Authorization: Bearer
TOKEN``; the token's SHA-256 finds its user (``store.accounts``). A project exists, for a
caller, only if they are one of its members or an admin: any other project, and every
experiment in it, is answered 404 exactly as one that does not exist, so names do not leak.
Inside a project members act on its experiments; leaders also add and remove members;
admins create users and projects and may do everything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from nestbed.errors import NestbedError, UserError
from nestbed.server.timing import work_started
from nestbed.store.accounts import users_text
from nestbed.store.records import UserRecord

if TYPE_CHECKING:
    from nestbed.server.app import Server

bearer = HTTPBearer(auto_error=False, description="An API token (`nestbed serve --init-admin`).")


class NotFound(UserError):
    """No such thing, as far as the caller may know (404)."""


class Forbidden(UserError):
    """The caller sees the thing but may not do this to it (403)."""


class Invalid(UserError):
    """The request is well formed but its content is not (422)."""


class TooMany(UserError):
    """The caller already holds as many of something as the server allows one user (429)."""


@dataclass
class Entry:
    """The audit row a request is writing: what it ends with, on which experiment."""

    outcome: str = "ok"
    experiment: str | None = None


@dataclass(frozen=True)
class Caller:
    """The authenticated user of one request, and the server it asks."""

    user: UserRecord
    server: Server

    @property
    def name(self) -> str:
        return self.user.name

    def role(self, project: str) -> str:
        """The caller's role in ``project`` (``admin`` for an admin); ``NotFound`` if the
        caller is not a member (or the project does not exist: the same answer)."""
        if self.user.is_admin:
            if self.server.accounts.project(project) is None:
                raise _no_project(project)
            return "admin"
        role = self.server.accounts.role(project, self.user.name)
        if role is None:
            raise _no_project(project)
        return role

    def lead(self, project: str, what: str = "change its members") -> None:
        """``Forbidden`` unless the caller leads ``project`` or is an admin."""
        if self.role(project) not in ("leader", "admin"):
            raise Forbidden(f"only a leader of project {project!r} may {what}")

    @contextlib.contextmanager
    def audited(
        self, action: str, *, project: str | None = None, experiment: str | None = None
    ) -> Iterator[Entry]:
        """Writes one audit row for the request in the block: ``ok`` (or the outcome the
        block sets on the yielded entry), ``denied: ...`` or ``refused: ...`` with the
        reason."""
        entry = Entry(experiment=experiment)
        try:
            yield entry
        except NestbedError as exc:
            named = in_users_names(exc, project, entry.experiment)
            kind = "denied" if isinstance(exc, NotFound | Forbidden) else "refused"
            entry.outcome = f"{kind}: {named}"
            if named is exc:
                raise
            raise named from None
        except BaseException as exc:
            entry.outcome = f"internal error: {type(exc).__name__}"
            raise
        finally:
            self.server.accounts.audit(self.name, action, entry.outcome, project=project,
                                       experiment=entry.experiment)  # fmt: skip

    def admin(self, what: str) -> None:
        if not self.user.is_admin:
            raise Forbidden(f"only an admin may {what}")

    def self_or_admin(self, user: str) -> None:
        if user != self.user.name and not self.user.is_admin:
            raise Forbidden("only an admin may manage another user's tokens")


def in_users_names(exc: NestbedError, project: str | None, experiment: str | None) -> NestbedError:
    """``exc``, or the same error saying the experiment's name instead of its stored name."""
    text = str(exc)
    said = users_text(text, project, experiment)
    if said == text:
        return exc
    try:
        return type(exc)(said)
    except TypeError:  # an error that carries more than a sentence (a file's problems)
        return exc


def _no_project(project: str) -> NotFound:
    return NotFound(f"there is no project {project!r}; see yours with GET /v1/projects")


def server_of(request: Request) -> Server:
    return request.app.state.server  # type: ignore[no-any-return]


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """The request's user; 401 without a valid bearer token. Checked in the event loop, not
    in a worker thread: the token's user is nearly always in ``Accounts``' cache, so this
    costs no store query, and a request then takes one hop to a worker thread (its
    handler's), not two, each a wait for a thread and for the interpreter on a busy server."""
    work_started(request.scope)  # the first of a request's work, after its body and checks
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise _unauthorized("this API needs a bearer token (Authorization: Bearer TOKEN)")
    server = server_of(request)
    user = server.accounts.user_for_token(credentials.credentials)
    if user is None:
        raise _unauthorized("the token is not known to this server (wrong or revoked)")
    return Caller(user=user, server=server)


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


Who = Annotated[Caller, Depends(caller)]
"""A route's parameter for the authenticated caller."""
