"""The client side of the server's API, for the CLI's ``--server`` mode: the standard
library's urllib and json only, so a command that talks to a server starts as fast as a
local one.

The server is ``--server URL`` or ``$NESTBED_SERVER``; the token ``$NESTBED_TOKEN`` or the
first line of ``$XDG_CONFIG_HOME/nestbed/token`` (``~/.config/nestbed/token``). The
server's refusals come back as nestbed's errors with the server's own sentence: 4xx as
``UserError`` (a bad file keeps its file:line problems, one per line), 5xx and an
unreachable server as ``EnvironmentProblem``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from nestbed.errors import EnvironmentProblem, Problem, SpecError, UserError
from nestbed.settings import config_dir

SERVER_ENV = "NESTBED_SERVER"
TOKEN_ENV = "NESTBED_TOKEN"
PROJECT_ENV = "NESTBED_PROJECT"
TIMEOUT_S = 60.0


def token_file(environ: dict[str, str] | None = None) -> Path:
    """Where the client looks for its token when ``$NESTBED_TOKEN`` is not set."""
    return config_dir(environ) / "token"


def find_token(environ: dict[str, str] | None = None) -> str:
    """The token to send: ``$NESTBED_TOKEN``, else the token file's first line."""
    env = os.environ if environ is None else environ
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV].strip()
    path = token_file(env)
    try:
        token = path.read_text().strip().splitlines()
    except FileNotFoundError:
        token = []
    except OSError as exc:
        raise UserError(f"cannot read the token file {path} ({exc.strerror})") from None
    if not token:
        raise UserError(
            f"no token for the nestbed server: set {TOKEN_ENV} or write your token into {path}"
        )
    return token[0]


class Client:
    """One server and one token."""

    def __init__(self, url: str, token: str, timeout_s: float = TIMEOUT_S) -> None:
        if not url.startswith(("http://", "https://")):
            raise UserError(f"server URL {url!r} is not http:// or https://; write the full URL")
        self.url, self._token, self.timeout_s = url.rstrip("/"), token, timeout_s

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON reply to ``method path`` (``body`` sent as JSON)."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self._token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EnvironmentProblem(
                f"cannot reach the nestbed server at {self.url} ({reason}); check --server or "
                f"{SERVER_ENV} and that the server runs"
            ) from None

    def session(self, project: str, name: str, node: str) -> Any:
        """A WebSocket to an exec or shell session in ``node`` (``server.sessions``): a
        ``websockets`` sync connection, whose refusal comes back as the API's."""
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.sync.client import connect

        scheme, rest = self.url.split("://", 1)
        path = self.experiments_path(project, name, f"nodes/{urllib.parse.quote(node)}/session")
        url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}"
        try:
            # No per-message compression: it halved a session's output rate (bench/sessions.py).
            return connect(url, additional_headers={"Authorization": f"Bearer {self._token}"},
                           open_timeout=self.timeout_s, max_size=2**22,
                           compression=None)  # fmt: skip
        except InvalidStatus as exc:
            reply = exc.response
            raise self.refusal(reply.status_code, reply.reason_phrase, reply.body) from None
        except (WebSocketException, OSError, TimeoutError) as exc:
            raise EnvironmentProblem(
                f"cannot open a session on the nestbed server at {self.url} ({exc}); check "
                f"--server or {SERVER_ENV} and that the server runs"
            ) from None

    def _refusal(self, exc: urllib.error.HTTPError) -> Exception:
        return self.refusal(exc.code, exc.reason, exc.read())

    def refusal(self, code: int, reason: str, body: bytes | None) -> Exception:
        """The error of a refusal with HTTP status ``code`` and ``body`` (the API's JSON)."""
        try:
            reply = json.loads(body or b"{}")
        except ValueError:
            reply = {}
        detail = reply.get("detail") if isinstance(reply, dict) else None
        if isinstance(detail, list):  # pydantic's validation errors
            detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}"
                               for d in detail)  # fmt: skip
        detail = detail or reason
        if code == 401:
            return UserError(
                f"the nestbed server at {self.url} refused the token ({detail}); set "
                f"{TOKEN_ENV} or {token_file()} to a valid token"
            )
        if code >= 500:
            return EnvironmentProblem(f"the nestbed server at {self.url} failed: {detail}")
        problems = reply.get("problems") if isinstance(reply, dict) else None
        if problems:
            return SpecError([Problem(p["message"], p.get("file"), p.get("line"))
                              for p in problems])  # fmt: skip
        return UserError(str(detail))

    # -- the API -----------------------------------------------------------------------------

    def project(self, given: str | None) -> str:
        """The project to work in: ``given``, ``$NESTBED_PROJECT``, or the caller's only one."""
        chosen = given or os.environ.get(PROJECT_ENV)
        if chosen:
            return chosen
        mine = [m["project"] for m in self.request("GET", "/v1/whoami")["projects"]]
        if len(mine) == 1:
            return mine[0]
        listed = ", ".join(mine) or "none"
        raise UserError(f"choose a project with --project or {PROJECT_ENV} (yours: {listed})")

    def experiments_path(self, project: str, name: str | None = None, verb: str = "") -> str:
        path = f"/v1/projects/{urllib.parse.quote(project)}/experiments"
        if name is not None:
            path += f"/{urllib.parse.quote(name)}"
        return path + (f"/{verb}" if verb else "")
