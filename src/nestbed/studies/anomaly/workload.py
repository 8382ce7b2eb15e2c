"""The anomaly paper's connection-pair workload (§4.2, Table 2): a probe TCP transfer then a
data transfer, several pairs at once, on a schedule; `python -m ... send|serve`.

A pair's probe and data connections go to two ports of the server (PORT and PORT+1) whose
listening sockets carry the probe's and the data's receive buffer, so each connection's
window is fixed at its handshake, as NWS set it. The sender writes its bytes, shuts its side
down, and the server answers with the count it received: a transfer is ``ok`` only when that
count is the size asked for and arrived within the time limit; otherwise ``failed`` (the
paper's rule: "smaller than expected or ... more than 5 minutes").
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIB = 1024
MIB = 1024 * KIB
# Table 2 of the paper: (probe, data) sizes; KB and MB taken as binary (NWS's 64 KB probe).
TABLE2 = (
    (16 * KIB, 8 * MIB),
    (16 * KIB, 16 * MIB),
    (32 * KIB, 16 * MIB),
    (64 * KIB, 16 * MIB),
    (64 * KIB, 32 * MIB),
)
PROBE_BUFFER = 16 * KIB  # SO_SNDBUF / SO_RCVBUF of probe connections (§4.2)
DATA_BUFFER = 64 * KIB  # and of data connections
PAIRS = 3  # connection pairs at once
EVERY_S = 300.0  # a round every 5 minutes
LIMIT_S = 300.0  # a transfer longer than this failed
CONNECT_WAIT_S = 10.0  # the server may still be starting
_CHUNK = 64 * KIB
_COUNT = struct.Struct("!Q")  # the server's answer: bytes received

RECORD_COLUMNS = (
    "round",
    "combo",
    "pair",
    "kind",
    "size_bytes",
    "local_port",
    "server",
    "port",
    "start_unix_s",
    "end_unix_s",
    "duration_s",
    "sent_bytes",
    "received_bytes",
    "throughput_bytes_per_s",
    "outcome",
    "reason",
)


@dataclass(frozen=True)
class Schedule:
    """What `send` does: ``rounds`` rounds ``every_s`` apart (a late round starts at once);
    each round runs every (probe, data) combination of ``sizes`` in turn, ``pairs`` at once."""

    sizes: tuple[tuple[int, int], ...] = TABLE2
    pairs: int = PAIRS
    rounds: int = 1
    every_s: float = EVERY_S
    limit_s: float = LIMIT_S
    probe_buffer: int = PROBE_BUFFER
    data_buffer: int = DATA_BUFFER


# -- sizes -------------------------------------------------------------------------------------

_UNITS = {"": 1, "B": 1, "K": KIB, "KB": KIB, "KIB": KIB, "M": MIB, "MB": MIB, "MIB": MIB}


def parse_bytes(text: str) -> int:
    """'16KB' -> 16384: B, K/KB/KiB, M/MB/MiB, binary as in the paper's sizes."""
    stripped = text.strip()
    number = stripped.rstrip("BbKkMmIi")
    unit = stripped[len(number) :].upper()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value <= 0:
        raise ValueError(f"{text!r} is not a size; write e.g. 16KB or 8MB")
    return int(value * _UNITS[unit])


def parse_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """'16KB/8MB,64KB/32MB' -> ((16384, 8388608), (65536, 33554432))."""
    combos = []
    for item in text.split(","):
        probe, sep, data = item.partition("/")
        if not sep:
            raise ValueError(f"{item!r} is not PROBE/DATA; write e.g. 16KB/8MB")
        combos.append((parse_bytes(probe), parse_bytes(data)))
    return tuple(combos)


# -- the receiving side ------------------------------------------------------------------------


def listener(port: int, rcvbuf: int, host: str = "") -> socket.socket:
    """A listening TCP socket whose connections get ``rcvbuf`` (set before listen, so the
    window scale chosen at the handshake fits it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def serve(listeners: Sequence[socket.socket], stop: threading.Event) -> None:
    """Accepts on every listener until ``stop``; each connection is read to its end and
    answered with the byte count."""
    threads = [
        threading.Thread(target=_accept, args=(sock, stop), daemon=True) for sock in listeners
    ]
    for thread in threads:
        thread.start()
    stop.wait()
    for sock in listeners:
        sock.close()


def _accept(sock: socket.socket, stop: threading.Event) -> None:
    sock.settimeout(0.2)  # to notice stop
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        threading.Thread(target=_receive, args=(conn,), daemon=True).start()


def _receive(conn: socket.socket) -> None:
    with conn:
        conn.settimeout(None)
        count = 0
        buffer = bytearray(_CHUNK)
        try:
            while n := conn.recv_into(buffer):
                count += n
            conn.sendall(_COUNT.pack(count))
        except OSError:
            pass  # the sender gave up (its time limit); it records the failure


# -- the sending side --------------------------------------------------------------------------


def transfer(server: str, port: int, size: int, sndbuf: int, limit_s: float) -> dict[str, Any]:
    """One transfer of ``size`` bytes; its record (RECORD_COLUMNS' transfer fields)."""
    start = time.time()
    deadline = time.monotonic() + limit_s
    record: dict[str, Any] = {"server": server, "port": port, "size_bytes": size,
                              "start_unix_s": start, "local_port": None, "sent_bytes": 0,
                              "received_bytes": None}  # fmt: skip
    payload = memoryview(bytes(_CHUNK))
    try:
        sock = _connect(server, port, sndbuf, deadline)
    except OSError as exc:
        return _ended(record, "failed", f"connect: {_why(exc)}")
    with sock:
        record["local_port"] = sock.getsockname()[1]
        try:
            while record["sent_bytes"] < size:
                n = min(_CHUNK, size - record["sent_bytes"])
                sock.settimeout(_left(deadline))
                record["sent_bytes"] += sock.send(payload[:n])  # counts a partial send too
            sock.shutdown(socket.SHUT_WR)
            record["received_bytes"] = _read_count(sock, deadline)
        except (OSError, ValueError) as exc:
            reason = "time limit" if isinstance(exc, TimeoutError) else _why(exc)
            return _ended(record, "failed", reason)
    if record["received_bytes"] != size:
        return _ended(record, "failed", f"the server received {record['received_bytes']} bytes")
    return _ended(record, "ok", "")


def _connect(server: str, port: int, sndbuf: int, deadline: float) -> socket.socket:
    """Connects with ``sndbuf`` set first; retries a refused connection for a while (the
    server is started by the same run, maybe a moment later)."""
    give_up = min(deadline, time.monotonic() + CONNECT_WAIT_S)
    while True:
        info = socket.getaddrinfo(server, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        sock.settimeout(_left(deadline))
        try:
            sock.connect(info[4])
            return sock
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() >= give_up:
                raise
            time.sleep(0.1)
        except OSError:
            sock.close()
            raise


def _read_count(sock: socket.socket, deadline: float) -> int:
    answer = b""
    while len(answer) < _COUNT.size:
        sock.settimeout(_left(deadline))
        chunk = sock.recv(_COUNT.size - len(answer))
        if not chunk:
            raise ValueError("the server closed without its count")
        answer += chunk
    return int(_COUNT.unpack(answer)[0])


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("time limit")
    return left


def _why(exc: BaseException) -> str:
    return (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).rstrip(".")


def _ended(record: dict[str, Any], outcome: str, reason: str) -> dict[str, Any]:
    end = time.time()
    duration = end - record["start_unix_s"]
    ok = outcome == "ok"
    return {**record, "end_unix_s": end, "duration_s": duration, "outcome": outcome,
            "reason": reason,
            "throughput_bytes_per_s": record["size_bytes"] / duration if ok else None}  # fmt: skip


def connection_pair(
    server: str, port: int, probe: int, data: int, schedule: Schedule
) -> list[dict[str, Any]]:
    """A probe transfer to ``port``, then a data transfer to ``port + 1``."""
    first = transfer(server, port, probe, schedule.probe_buffer, schedule.limit_s)
    second = transfer(server, port + 1, data, schedule.data_buffer, schedule.limit_s)
    return [{**first, "kind": "probe"}, {**second, "kind": "data"}]


def send(
    server: str,
    port: int,
    schedule: Schedule,
    record: Callable[[dict[str, Any]], None],
    stop: threading.Event | None = None,
) -> int:
    """Runs the schedule against a server; every transfer's record goes to ``record`` as it
    ends. Returns the number of failed transfers."""
    stop = stop or threading.Event()
    failed = 0
    lock = threading.Lock()
    began = time.monotonic()
    for round_ in range(schedule.rounds):
        if stop.wait(max(0.0, began + round_ * schedule.every_s - time.monotonic())):
            break
        for combo, (probe, data) in enumerate(schedule.sizes, start=1):
            if stop.is_set():
                break

            def one(pair: int, probe: int, data: int, where: dict[str, int]) -> None:
                nonlocal failed
                for row in connection_pair(server, port, probe, data, schedule):
                    with lock:
                        failed += row["outcome"] != "ok"
                        record({**row, **where, "pair": pair})

            where = {"round": round_ + 1, "combo": combo}
            threads = [
                threading.Thread(target=one, args=(pair, probe, data, where), daemon=True)
                for pair in range(1, schedule.pairs + 1)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    return failed


class Records:
    """transfers.csv, a row flushed as each transfer ends (a killed sender keeps its rows)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, RECORD_COLUMNS, extrasaction="ignore")
        self._writer.writeheader()
        self._file.flush()
        self._lock = threading.Lock()

    def add(self, row: dict[str, Any]) -> None:
        cells = {k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()}
        with self._lock:
            self._writer.writerow(cells)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


# -- the command -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nestbed.studies.anomaly.workload",
        description="Connection pairs of the anomaly paper: probe then data transfer.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="receive on PORT (probes) and PORT+1 (data)")
    s.add_argument("--port", type=int, default=5001)
    s.add_argument("--bind", default="")
    s.add_argument("--probe-buffer", type=parse_bytes, default=PROBE_BUFFER)
    s.add_argument("--data-buffer", type=parse_bytes, default=DATA_BUFFER)
    c = sub.add_parser("send", help="run the schedule against a server")
    c.add_argument("--to", required=True, help="the server's name or address")
    c.add_argument("--port", type=int, default=5001)
    c.add_argument("--sizes", type=parse_sizes, default=TABLE2, help="PROBE/DATA,... (Table 2)")
    c.add_argument("--pairs", type=int, default=PAIRS)
    c.add_argument("--rounds", type=int, default=1)
    c.add_argument("--every", type=float, default=EVERY_S, help="seconds between rounds")
    c.add_argument("--limit", type=float, default=LIMIT_S, help="seconds a transfer may take")
    c.add_argument("--probe-buffer", type=parse_bytes, default=PROBE_BUFFER)
    c.add_argument("--data-buffer", type=parse_bytes, default=DATA_BUFFER)
    c.add_argument("--out", type=Path, help="folder of transfers.csv (default: the program's)")
    return parser


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(_signum: int, _frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    return stop


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    stop = _stop_on_signals()
    if args.command == "serve":
        try:
            socks = [listener(args.port, args.probe_buffer, args.bind),
                     listener(args.port + 1, args.data_buffer, args.bind)]  # fmt: skip
        except OSError as exc:
            parser.error(f"cannot listen on ports {args.port}-{args.port + 1}: {_why(exc)}")
        serve(socks, stop)
        return 0
    if args.pairs < 1 or args.rounds < 1 or args.limit <= 0 or args.every < 0:
        parser.error("--pairs and --rounds must be at least 1, --limit positive")
    schedule = Schedule(args.sizes, args.pairs, args.rounds, args.every, args.limit,
                        args.probe_buffer, args.data_buffer)  # fmt: skip
    folder = args.out or Path(os.environ.get("NESTBED_PROGRAM_DIR", "."))
    records = Records(folder / "transfers.csv")

    def record(row: dict[str, Any]) -> None:
        records.add(row)
        size = row["size_bytes"]
        print(f"round {row['round']} combo {row['combo']} pair {row['pair']} {row['kind']} "
              f"{size} B: {row['outcome']} in {row['duration_s']:.3f} s {row['reason']}".rstrip(),
              flush=True)  # fmt: skip

    try:
        failed = send(args.to, args.port, schedule, record, stop)
    finally:
        records.close()
    print(f"done: {failed} failed transfers", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
