"""Where a request's time goes inside the server: an ASGI middleware that times every request
from its arrival at the application to its last byte, by route, split into the wait before its
work began (reading the body, validation, the event loop's turn to check its token) and the
rest (its handler, with its wait for a worker thread, and sending the reply); what a client
measures beyond that is uvicorn's own queue and the network.

The figures are kept in memory (the newest ``KEEP`` per route), served to admins at
``GET /v1/server/timings`` (``bench/server_load.py`` prints them beside its own), and a
summary goes to the server's log when it stops. A request slower than ``SLOW_S`` is logged
when it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from typing import Any

log = logging.getLogger("nestbed.server")

KEEP = 20_000  # the newest requests per route that the figures are drawn from
SLOW_S = 2.0
WORK_STARTED = "nestbed.work_started"  # the scope key the token check stamps (``auth``)


def work_started(scope: dict[str, Any]) -> None:
    """Marks the moment a request's work begins (its token check, ``auth.caller``)."""
    scope.setdefault(WORK_STARTED, time.perf_counter())


class Timings:
    """The server's request times by route (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, deque[tuple[float, float]]] = defaultdict(lambda: deque(maxlen=KEEP))

    def add(self, route: str, total_s: float, wait_s: float) -> None:
        with self._lock:
            self._seen[route].append((total_s, wait_s))

    def summary(self) -> list[dict[str, Any]]:
        """Per route: requests, and p50, p99 and max of the time in the server and of the
        wait before the handler's work, in milliseconds; the busiest route first."""
        with self._lock:
            seen = {route: list(times) for route, times in self._seen.items()}
        rows = []
        for route, times in seen.items():
            total = sorted(t for t, _ in times)
            wait = sorted(w for _, w in times)
            rows.append({
                "route": route, "requests": len(times),
                "p50_ms": _ms(total, 0.5), "p99_ms": _ms(total, 0.99), "max_ms": total[-1] * 1e3,
                "wait_p50_ms": _ms(wait, 0.5), "wait_p99_ms": _ms(wait, 0.99),
            })  # fmt: skip
        return sorted(rows, key=lambda r: -r["requests"])

    def log_summary(self) -> None:
        for row in self.summary():
            log.info("timing: %(route)s: %(requests)d requests, p50 %(p50_ms).1f ms, p99 "
                     "%(p99_ms).1f ms (waiting: p50 %(wait_p50_ms).1f ms, p99 %(wait_p99_ms).1f "
                     "ms)", row)  # fmt: skip


def _ms(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


class Timing:
    """The ASGI middleware (module docstring)."""

    def __init__(self, app: Any, timings: Timings) -> None:
        self.app, self.timings = app, timings

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            ended = time.perf_counter()
            route = scope.get("route")
            name = f"{scope['method']} {getattr(route, 'path', 'unrouted')}"
            wait = scope.get(WORK_STARTED, ended) - arrived
            self.timings.add(name, ended - arrived, wait)
            if ended - arrived > SLOW_S:
                log.info("slow request: %s took %.2f s (%.2f s before its work began)", name,
                         ended - arrived, wait)  # fmt: skip
