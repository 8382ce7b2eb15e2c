"""Time requests over UDP between the controlling machine and each host's agent, for the
clock offsets (``clocks``): a request is a datagram of 8 bytes (its number), the reply the
same 8 bytes and the host's wall clock and monotonic clock when it answered. Straight over
the underlay, without Dask: a round trip is then the network's and two system calls, some
hundred microseconds, where a Dask request's took milliseconds, and its half is the error.

The agent answers in a thread of its own (``TimeServer``); the controlling machine asks
(``ask``), one request at a time, each waited for a little while (a lost one is skipped).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable

from nestbed.backend.cluster.clocks import Sample

DEFAULT_PORT = 14790  # UDP, next to VXLAN's 14789
REQUEST = struct.Struct("!Q")
REPLY = struct.Struct("!Qqq")  # the request's number, the host's time_ns and monotonic_ns
WAIT_S = 0.2  # for one reply; a later one is stale and dropped


class TimeServer:
    """Answers time requests on UDP ``port`` of every address of this host's network."""

    def __init__(self, port: int = DEFAULT_PORT, address: str = "0.0.0.0"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, name="time", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(64)
            except OSError:  # closed
                return
            if len(data) != REQUEST.size:
                continue
            (number,) = REQUEST.unpack(data)
            with contextlib.suppress(OSError):
                reply = REPLY.pack(number, time.time_ns(), time.monotonic_ns())
                self.sock.sendto(reply, peer)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


# One time request: (wall, monotonic) samples, or None if no reply came.
Ask = Callable[[], tuple[Sample, Sample] | None]


def asker(address: str, port: int) -> tuple[Ask, Callable[[], None]]:
    """A function asking the host at ``address`` the time once, and one closing its socket."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((address, port))
    sock.settimeout(WAIT_S)
    counter = iter(range(1 << 62))

    def ask() -> tuple[Sample, Sample] | None:
        number = next(counter)
        t1, m1 = time.time_ns(), time.monotonic_ns()
        try:
            sock.send(REQUEST.pack(number))
            while True:
                data = sock.recv(64)
                t4, m4 = time.time_ns(), time.monotonic_ns()
                if len(data) == REPLY.size:
                    got, wall, mono = REPLY.unpack(data)
                    if got == number:
                        return Sample(t1, wall, t4), Sample(m1, mono, m4)
        except OSError:  # timed out, or refused (nothing listens there)
            return None

    return ask, sock.close
