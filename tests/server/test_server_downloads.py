"""A run's file served over the API keeps no descriptor open once its request has ended,
however it ended: sent whole, cut short by a client hanging up mid-download, or refused
for a range the file does not have (Starlette answers those without running the
response's background task, which used to close the descriptor)."""

from __future__ import annotations

import os
import socket
import struct
import time
import urllib.request
from pathlib import Path

from server_helpers import LINE, READY_TIMEOUT_S, People, Served, wait_for

EXP = "/v1/projects/net/experiments/line"
BIG_BYTES = 256 * 1024 * 1024  # far more than the socket buffers hold: the send is cut short


def _get(path: str, token: str, *headers: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {token}",
                         *headers, "", ""]).encode()  # fmt: skip


def _run_folder(served: Served, people: People) -> Path:
    ada = served.client(people["ada"])
    ada.request("PUT", EXP, {"file_name": "line.yaml", "text": LINE})
    for kind in ("swapin", "swapout"):
        ada.request("POST", f"{EXP}/{kind}")
        wait_for(ada, EXP, kind)
    return Path(ada.request("GET", EXP + "/runs")[0]["results_dir"])


def _open_on(pid: int, path: Path) -> int:
    """How many descriptors of process ``pid`` are open on ``path``."""
    found = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found += os.readlink(fd) == str(path)
        except OSError:  # closed meanwhile
            continue
    return found


def _left_open(pid: int, path: Path) -> int:
    """``_open_on`` once the server has had time to finish with the request (it closes
    after the last byte has gone, which the client may see first)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while _open_on(pid, path) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _open_on(pid, path)


def test_a_client_that_hangs_up_mid_download_leaves_no_descriptor(
    served: Served, people: People
) -> None:
    big = _run_folder(served, people) / "big.bin"
    with big.open("wb") as out:
        out.truncate(BIG_BYTES)  # sparse: no disk, all zeros
    assert served.process is not None
    request = _get(f"{EXP}/runs/1/files/big.bin", people["ada"])
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", served.port), timeout=60) as sock:
            sock.sendall(request)
            head = sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 200"), head[:200]
            # Hang up at once with a reset, in the middle of the body.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert _left_open(served.process.pid, big) == 0
    # The server is still well: the same file whole, to a client that stays.
    small = big.with_name("small.txt")
    small.write_text("kept\n")
    fetch = urllib.request.Request(served.url + f"{EXP}/runs/1/files/small.txt",
                                   headers={"Authorization": f"Bearer {people['ada']}"})  # fmt: skip
    with urllib.request.urlopen(fetch, timeout=60) as reply:
        assert reply.read() == b"kept\n"
    assert _left_open(served.process.pid, small) == 0


def test_a_refused_range_leaves_no_descriptor(served: Served, people: People) -> None:
    small = _run_folder(served, people) / "small.txt"
    small.write_text("kept\n")
    assert served.process is not None
    path = f"{EXP}/runs/1/files/small.txt"
    for asked, answer in (("Range: bytes=1000-2000", b"HTTP/1.1 416"),  # past its end
                          ("Range: lines=1-2", b"HTTP/1.1 400")):  # fmt: skip
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", served.port), timeout=60) as sock:
                sock.sendall(_get(path, people["ada"], asked))
                assert sock.recv(65536).startswith(answer), asked
    assert _left_open(served.process.pid, small) == 0
