"""Pages from the portal's Jinja2 templates (autoescaped), with the filters they share."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, is_undefined, select_autoescape
from markupsafe import Markup

from nestbed.portal.session import csrf_token, keep_csrf

HERE = Path(__file__).parent


def duration(seconds: float | None) -> str:
    """``3 d 4 h``, ``2 h 5 min``, ``40 s``; a dash for unknown."""
    if seconds is None:
        return "—"
    s = int(seconds)
    for unit, size, smaller, small_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60)):
        if s >= size:
            return f"{s // size} {unit} {(s % size) // small_size} {smaller}"
    return f"{s // 60} min" if s >= 60 else f"{s} s"


def rate(bps: float | None) -> str:
    if bps is None or is_undefined(bps):
        return "—"
    for unit, size in (("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bps >= size:
            return f"{bps / size:.{2 if bps / size < 10 else 1}f} {unit}"
    return f"{bps:.0f} b/s"


def when(at: datetime | None) -> str:
    return "—" if at is None else at.strftime("%Y-%m-%d %H:%M:%S UTC")


def size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n} {unit}"
        n //= 1000
    return f"{n} TB"


env = Environment(loader=FileSystemLoader(HERE / "templates"),
                  autoescape=select_autoescape(default=True), auto_reload=False)  # fmt: skip
env.filters.update(duration=duration, rate=rate, when=when, size=size)


def fragment(template: str, **context: Any) -> Markup:
    """Part of a page, rendered once to be kept (a 1 000-node table) and put in pages."""
    return Markup(env.get_template(template).render(**context))


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    text = env.get_template(template).render(csrf=csrf_token(request), request=request, **context)
    reply = HTMLResponse(text, status_code=status)
    keep_csrf(request, reply)
    return reply
