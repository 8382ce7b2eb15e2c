"""Talking to an experiment's link emulator (nestbed-linkd) over its control socket: its
pipes' counters, setting the pipes a link change touched, and changes handed over ahead of
their time, which linkd applies then (``LinkdClient.request_at``)."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from nestbed.backend.plan import PipeSettings
from nestbed.backend.sockets import SocketClient
from nestbed.errors import InternalError, NestbedError, reason

Pipe = tuple[str, str, str]  # (link, port, direction) of one of linkd's pipes


class Channel(Protocol):
    """What speaks linkd's protocol: a socket client, or the fake back end's recorder."""

    def request(self, op: str, **fields: Any) -> dict[str, Any]: ...

    def close(self) -> None: ...


Request = tuple[str, dict[str, Any]]  # op and fields, as Channel.request takes them


@runtime_checkable
class TimedChannel(Channel, Protocol):
    """Link emulators a hop away (a cluster's hosts): a change is handed over ahead of its
    time, with the time, and each emulator's host applies it then."""

    def request_at(self, due: float, requests: list[Request]) -> float:
        """Carries out ``requests`` in order when this machine's time.monotonic() reads
        ``due`` (at once if it has passed); when the last host applied them, on that clock."""
        ...


class LinkdClient:
    """This machine's nestbed-linkd for threads at once (a run's link events, its sampler):
    each request goes on a connection no other is using, since a timed one holds its
    connection until linkd has applied it (linkd serves each connection's requests in
    order, and other connections meanwhile). The first is opened at once (an ``OSError`` if
    linkd does not listen), others when none is free; all are kept for the next request, but
    one whose request failed is closed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.idle: list[SocketClient] = [SocketClient(path)]
        self.lock = threading.Lock()
        self.closed = False

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        with self.lock:
            if self.closed:
                raise InternalError(f"the connection to nestbed-linkd at {self.path} is closed")
            client = self.idle.pop() if self.idle else None
        client = client or SocketClient(self.path)
        try:
            reply = client.request(op, **fields)
        except BaseException:  # (refused, broken, or left half-read: a new one costs little)
            client.close()
            raise
        self._give_back(client)
        return reply

    def request_at(self, due: float, requests: list[Request]) -> float:
        """Has linkd apply ``requests`` (of one link) in order when time.monotonic() reads
        ``due`` (at once if it has passed); when it applied them, by its clock, which is
        this one (CLOCK_MONOTONIC). Nothing to apply takes effect at its time."""
        if not requests:
            return due
        timed = [{"op": op, **fields} for op, fields in requests]
        # (rounded up: applied at or after the due time in nanoseconds is never before it)
        reply = self.request("at", at_ns=math.ceil(due * 1e9), requests=timed)
        return int(reply["applied_ns"]) / 1e9

    def _give_back(self, client: SocketClient) -> None:
        with self.lock:
            if not self.closed:
                self.idle.append(client)
                return
        client.close()

    def close(self) -> None:
        """Closes the connections; one in use is closed when its request is done."""
        with self.lock:
            self.closed, idle, self.idle = True, self.idle, []
        for client in idle:
            client.close()

    def __enter__(self) -> LinkdClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Requests:
    """A Channel that keeps the requests asked of it, to send them later in one go."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self.requests.append((op, fields))
        return {}

    def close(self) -> None:
        """Nothing is open."""


def pipe_counters(client: Channel, why: list[str] | None = None) -> dict[Pipe, dict[str, Any]]:
    """linkd's counters of every pipe now, in (link, port, direction) order; empty if linkd
    does not answer (and then the reason added to ``why``, if given)."""
    try:
        reply = client.request("counters")
    except (OSError, NestbedError) as exc:
        if why is not None:
            why.append(reason(exc))
        return {}
    return {
        (link, port, direction): _with_down(pipes, direction)
        for link, data in sorted(reply.get("links", {}).items())
        for port, pipes in sorted(data.get("ports", {}).items())
        for direction in ("egress", "ingress")
    }


def _with_down(port: dict[str, Any], direction: str) -> dict[str, Any]:
    """A pipe's counters, its drops with those of frames its port took while the link was
    down (linkd counts them by port, before they reach the egress pipe; nestbed-sim counts
    them in the pipe already)."""
    counters = port[direction]["counters"]
    if direction == "egress" and "admin_down" in port:
        down = int(port["admin_down"]) + int(port.get("blackholed", 0))
        counters = {**counters, "drops": {**counters["drops"], "down": down}}
    return counters


def set_changed_pipes(
    client: Channel, link: str, before: Iterable[PipeSettings], after: Iterable[PipeSettings]
) -> int:
    """Sets on linkd every pipe of ``link`` whose parameters ``after`` differ from ``before``
    (the same ports in the same order); how many it set."""
    changed = 0
    for (_, *was), (port, *now) in zip(before, after, strict=True):
        for direction, old, new in zip(("egress", "ingress"), was, now, strict=True):
            if new != old:
                client.request("set", link=link, port=port, direction=direction, params=new)
                changed += 1
    return changed


def drops_by_kind(counters: dict[str, Any]) -> dict[str, int]:
    """A pipe's drops as the results tables group them: by the loss model, by the queue
    (its hard limit and RED) and by anything else (drop-by-ordinal, the link down)."""
    drops = counters["drops"]
    return {
        "loss": drops["loss"],
        "queue": drops["queue_full"] + drops["red_early"] + drops["red_forced"],
        "other": drops["ordinal"] + drops.get("down", 0),
    }
