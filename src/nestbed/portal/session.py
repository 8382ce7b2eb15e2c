"""Who is looking at a page: the API token kept in an HttpOnly, SameSite=Strict cookie set
by the login form, checked as the API checks a bearer token, and the CSRF token every
state-changing form carries (an HMAC of the session's token, so it needs no server state and
a page from another site can neither read nor forge it)."""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from nestbed.server.auth import Caller, server_of

COOKIE = "nestbed_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


class LoginNeeded(Exception):
    """The request has no valid session: the portal answers with the login page."""


class BadCsrf(Exception):
    """A state-changing request without the session's CSRF token."""


def viewer(request: Request) -> Caller:
    """The request's user from the session cookie; ``LoginNeeded`` without one."""
    token = request.cookies.get(COOKIE)
    if not token:
        raise LoginNeeded()
    server = server_of(request)
    user = server.accounts.user_for_token(token)
    if user is None:
        raise LoginNeeded()
    return Caller(user=user, server=server)


def csrf_token(request: Request) -> str:
    token = request.cookies.get(COOKIE, "")
    return hmac.new(token.encode(), b"nestbed portal csrf", hashlib.sha256).hexdigest()


def check_csrf(request: Request, sent: str | None) -> None:
    """``BadCsrf`` unless ``sent`` (the form's field or the htmx header) is the session's."""
    sent = sent or request.headers.get(CSRF_HEADER, "")
    if not request.cookies.get(COOKIE) or not hmac.compare_digest(sent, csrf_token(request)):
        raise BadCsrf()
