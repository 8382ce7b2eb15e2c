"""A UDP socket in a node on another host, seen from the controlling machine as a socket
(``RemoteSocket``): what it sends leaves from the node, on the emulated network; what it
receives is drained from the host into one end of a local datagram pair, whose other end the
caller selects on and reads, as on a socket of its own. Sends wait for the next drain
(``remote.socket_drain``, one Dask task per host every ``DRAIN_S``), which carries all of
them: linktest's thousands of datagrams cost a task per host per round, not one each. Each
send carries the time it was asked for, and the host sends a drain's datagrams as far apart
as they were asked for: a round's worth at once would be a burst the links' queues drop,
which the caller, sending one by one, never made. Only the requests and what arrived cross
Dask; the datagrams themselves cross the network.
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from nestbed.backend.cluster.rounds import Rounds

DRAIN_S = 0.02
UNMEASURED_ROUND_S = 1.0  # what a drain is taken to last before one was timed

# A datagram to send: its bytes, where to, and when it was asked for (this machine's
# monotonic clock: only the gaps between sends count on the host).
Send = tuple[bytes, tuple[str, int], float]

# Runs a function of ``remote`` on hosts: {host: args} -> {host: answer or exception}.
OnHosts = Callable[[Callable[..., Any], dict[str, tuple[Any, ...]]], dict[str, Any]]


class RemoteSocket:
    """An unbound socket in a node on ``host``: setsockopt, bind, sendto there; setblocking,
    recv and fileno here."""

    def __init__(self, drainer: Drainer, host: str, key: str):
        self.drainer, self.host, self.key = drainer, host, key
        # What arrived waits in a queue here (a socket pair's own queue holds only a few
        # datagrams); the pair only makes it readable for select while the queue has any.
        self.local, self.feed = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.local.setblocking(False)
        self.feed.setblocking(False)
        self.lock = threading.Lock()
        self.arrived: collections.deque[bytes] = collections.deque()
        self.pending: list[Send] = []
        self.blocking = True
        self.closed = False

    def _call(self, method: str, *args: Any) -> Any:
        return self.drainer.call(self.host, self.key, method, args)

    def setsockopt(self, *args: Any) -> None:
        self._call("setsockopt", *args)

    def bind(self, address: tuple[str, int]) -> None:
        self._call("bind", address)

    def sendto(self, data: bytes, address: tuple[str, int]) -> int:
        """Sent with the next drain (as UDP, unacknowledged: an unreachable address is no
        error here)."""
        with self.lock:
            self.pending.append((bytes(data), address, time.monotonic()))
        return len(data)

    def take_pending(self) -> list[Send]:
        with self.lock:
            taken, self.pending = self.pending, []
        return taken

    def setblocking(self, flag: bool) -> None:
        self.blocking = flag

    def recv(self, size: int) -> bytes:
        while True:
            with self.lock:
                if self.arrived:
                    data = self.arrived.popleft()
                    if not self.arrived:
                        with contextlib.suppress(BlockingIOError):
                            self.local.recv(4096)  # no longer readable
                    return data[:size]
            if not self.blocking:
                raise BlockingIOError("no datagram has arrived")
            select.select([self.local], [], [])

    def fileno(self) -> int:
        return self.local.fileno()

    def deliver(self, datagrams: list[bytes]) -> None:
        with self.lock:
            if self.closed or not datagrams:
                return
            was_empty = not self.arrived
            self.arrived.extend(datagrams)
            if was_empty:
                self.feed.send(b"!")

    def close(self) -> None:
        self.drainer.forget(self)
        with contextlib.suppress(Exception):
            self._call("close")
        with self.lock:
            self.closed = True
            self.local.close()
            self.feed.close()

    def __enter__(self) -> RemoteSocket:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Drainer(Rounds):
    """Drains every open remote socket, DRAIN_S apart, while there are any."""

    def __init__(self, on_hosts: OnHosts):
        from nestbed.backend.cluster import remote

        self.remote, self.on_hosts = remote, on_hosts
        super().__init__("drain", DRAIN_S, self._drain)

    def _drain(self, asked: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return self.on_hosts(self.remote.socket_drain, {h: (k,) for h, k in asked.items()})

    def delay_s(self) -> float:
        """How much later than the network alone a datagram may arrive: it waits for a drain
        to be sent, and its arrival for another to be seen, each a pause and a round."""
        return 2 * (self.pause_s + self.slowest_s(UNMEASURED_ROUND_S))

    def question(self, thing: Any) -> list[Send]:
        return thing.take_pending()

    def open_socket(self, h: str, args: tuple[Any, ...]) -> RemoteSocket:
        (answer,) = self.on_hosts(self.remote.socket_open, {h: args}).values()
        if isinstance(answer, BaseException):
            raise answer
        sock = RemoteSocket(self, h, answer)
        self.add(sock)
        return sock

    def call(self, h: str, key: str, method: str, args: tuple[Any, ...]) -> Any:
        (answer,) = self.on_hosts(self.remote.socket_call, {h: (key, method, args)}).values()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def answered(self, host: str, answer: Any, things: dict[str, Any]) -> None:
        if isinstance(answer, BaseException):
            return  # the next drain asks again
        for key, datagrams in answer.items():
            things[key].deliver(datagrams)
