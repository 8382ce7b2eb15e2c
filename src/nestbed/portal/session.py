"""Who is looking at a page, and that a form comes from the portal's own page.

The session is the API token kept in an HttpOnly, SameSite=Strict cookie set by the login
form, checked as the API checks a bearer token. Forms are guarded by a CSRF token: each
browser gets a random seed in a second cookie (with its first page, the login page
included, and a new one at each login, so every session has its own), and every form that
changes something, the login form too, carries an HMAC of that seed under a key of the
server process. A page of another site can neither read the seed nor compute the HMAC, and
one that plants a seed cookie still cannot compute the token that goes with it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from fastapi import Request, Response

from nestbed.server.auth import Caller, server_of

COOKIE = "nestbed_session"
CSRF_COOKIE = "nestbed_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
_SEED = re.compile(r"[0-9a-f]{64}")
_KEY = secrets.token_bytes(32)
"""The process's CSRF key: a restarted server refuses the forms of pages it did not serve
(the page's 403 says to reload it)."""


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


def _seed(request: Request) -> str:
    """The browser's CSRF seed: its cookie's, else a new one that ``keep_csrf`` sets."""
    new = getattr(request.state, "csrf_seed", None)
    if new:
        return str(new)
    sent = request.cookies.get(CSRF_COOKIE, "")
    if _SEED.fullmatch(sent):
        return sent
    request.state.csrf_seed = secrets.token_hex(32)
    return str(request.state.csrf_seed)


def _token_of(seed: str) -> str:
    return hmac.new(_KEY, seed.encode(), hashlib.sha256).hexdigest()


def csrf_token(request: Request) -> str:
    """The token this browser's forms carry."""
    return _token_of(_seed(request))


def new_csrf_seed(request: Request) -> None:
    """A new seed for a new session (at login): tokens of the old one are refused after."""
    request.state.csrf_seed = secrets.token_hex(32)


def keep_csrf(request: Request, reply: Response) -> None:
    """Sets the seed cookie when this request made a new seed."""
    seed = getattr(request.state, "csrf_seed", None)
    if seed:
        reply.set_cookie(CSRF_COOKIE, seed, httponly=True, samesite="strict", path="/portal",
                         secure=request.url.scheme == "https")  # fmt: skip


def check_csrf(request: Request, sent: str | None) -> None:
    """``BadCsrf`` unless ``sent`` (the form's field or the htmx header) is the token of the
    browser's seed cookie (compared in constant time)."""
    sent = sent or request.headers.get(CSRF_HEADER, "")
    seed = request.cookies.get(CSRF_COOKIE, "")
    if not _SEED.fullmatch(seed) or not hmac.compare_digest(sent, _token_of(seed)):
        raise BadCsrf()
