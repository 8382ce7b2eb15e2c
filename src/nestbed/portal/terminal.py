"""The portal's web terminal: a page with xterm.js (vendored) in a node of a live
experiment, over the server's session WebSocket (``server.sessions``).

The same handler as the API's route is mounted under ``/portal``, where the browser sends
the portal's session cookie (its path); ``sessions.caller_of`` takes that cookie only with
an ``Origin`` of this server, since a WebSocket carries no CSRF token. Without JavaScript
the page lists the nodes and says a terminal needs it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from nestbed.portal.pages import E, Viewer, base
from nestbed.portal.render import page
from nestbed.server import experiments, sessions
from nestbed.server.accounts import AccountName
from nestbed.server.experiments import ExperimentName
from nestbed.store import State

router = APIRouter(prefix="/portal", include_in_schema=False)
router.add_api_websocket_route(E + "/nodes/{node}/session", sessions.session)


@router.get(E + "/terminal")
def terminal(request: Request, project: AccountName, name: ExperimentName, who: Viewer,
             node: str | None = None) -> HTMLResponse:  # fmt: skip
    """The node's terminal (``?node=NAME``), or the choice of a node."""
    shown = experiments.show(project, name, who)
    nodes = [n["name"] for n in shown.ir.get("nodes", [])]
    chosen = node if node in nodes else None
    here = base(project, name)
    return page(request, "terminal.html", who=who, title=f"{name}: terminal", e=shown,
                base=here, nodes=nodes, node=chosen, asked=node,
                active=shown.state == State.ACTIVE,
                socket=f"{here}/nodes/{chosen}/session" if chosen else None)  # fmt: skip
