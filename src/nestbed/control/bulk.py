"""The FTP agent's bulk TCP transfer: a sender of N bytes (or until stopped) and a receiver that
counts what arrives; each prints one JSON summary. Run in nodes as
``python -m nestbed.control.bulk recv|send``.

Unlike iperf3, whose server stops reading when its client has *written* the bytes asked for
(so what was still in flight is lost), the sender here shuts its side down and waits until
the receiver has read everything: ``send N`` means N bytes delivered, as in ns-2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import struct
import sys
import time
from typing import Any

CHUNK = 1 << 16
# struct tcp_info (linux/tcp.h): eight one-byte fields, then 32-bit ones; tcpi_total_retrans is
# the 24th of those.
_TOTAL_RETRANS_AT = 8 + 23 * 4


# Set by SIGINT or SIGTERM. A flag, not an exception: one raised between a send() returning
# and its count being added would lose the count. Sockets time out every TICK_S to look at it.
_stopped = False
TICK_S = 0.1


def _stop(_signum: int, _frame: Any) -> None:
    global _stopped
    _stopped = True


def _now_ns() -> int:
    return time.monotonic_ns()  # shared by every namespace of the host: the run's clock


def receive(bind: str, port: int, window: int | None) -> dict[str, Any]:
    """Accepts one connection and reads it to its end; bytes per whole second since the first
    byte arrived (``intervals``). WINDOW, a receive buffer, caps what the sender has in
    flight (set before listening, so the handshake announces its scale)."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if window:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    listener.bind((bind, port))
    listener.listen(1)
    listener.settimeout(TICK_S)
    total, first_ns, last_ns = 0, None, None
    intervals: list[int] = []
    buffer = bytearray(CHUNK * 4)
    connection = None
    while connection is None and not _stopped:
        with contextlib.suppress(TimeoutError):
            connection, _ = listener.accept()
    listener.close()
    if connection is not None:
        connection.settimeout(TICK_S)
        with connection:
            while not _stopped:
                try:
                    n = connection.recv_into(buffer)
                except TimeoutError:
                    continue
                if not n:
                    break
                now = _now_ns()
                if first_ns is None:
                    first_ns = now
                second = (now - first_ns) // 1_000_000_000
                while len(intervals) <= second:
                    intervals.append(0)
                intervals[second] += n
                total, last_ns = total + n, now
    seconds = (last_ns - first_ns) / 1e9 if first_ns is not None and last_ns else 0.0
    return {"bytes": total, "first_ns": first_ns, "seconds": seconds, "intervals": intervals}


def send(
    to: str, port: int, amount: int | None, window: int | None, congestion: str | None
) -> dict[str, Any]:
    """Sends AMOUNT bytes (without: until stopped), then waits until the receiver has read
    them all; reports the bytes written and the connection's retransmissions."""
    s = socket.socket(socket.AF_INET6 if ":" in to else socket.AF_INET, socket.SOCK_STREAM)
    if window:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, window)
    if congestion:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
    sent, started, error = 0, _now_ns(), None
    delivered = False
    try:
        s.connect((to, port))
        s.settimeout(TICK_S)
        data = bytes(CHUNK)
        while (amount is None or sent < amount) and not _stopped:
            piece = data if amount is None else data[: min(CHUNK, amount - sent)]
            with contextlib.suppress(TimeoutError):
                sent += s.send(piece)
        if not _stopped:
            s.shutdown(socket.SHUT_WR)
        while not _stopped:
            try:
                if not s.recv(CHUNK):  # the receiver closes once it has read everything
                    delivered = True
                    break
            except TimeoutError:
                continue
    except OSError as exc:
        error = f"{exc.strerror or exc} ({to}:{port})"
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    retransmits = struct.unpack_from("I", info, _TOTAL_RETRANS_AT)[0]
    s.close()  # what is still in the send buffer is delivered by the kernel
    return {
        "bytes": sent,
        "seconds": (_now_ns() - started) / 1e9,
        "retransmits": retransmits,
        "delivered": delivered,
        "error": error,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestbed.control.bulk")
    sub = parser.add_subparsers(dest="role", required=True)
    recv = sub.add_parser("recv")
    recv.add_argument("--bind", required=True)
    recv.add_argument("--port", type=int, required=True)
    recv.add_argument("--window", type=int)
    snd = sub.add_parser("send")
    snd.add_argument("--to", required=True)
    snd.add_argument("--port", type=int, required=True)
    snd.add_argument("--bytes", type=int)
    snd.add_argument("--window", type=int)
    snd.add_argument("--congestion")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    if args.role == "recv":
        summary = receive(args.bind, args.port, args.window)
    else:
        summary = send(args.to, args.port, args.bytes, args.window, args.congestion)
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0 if not summary.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
