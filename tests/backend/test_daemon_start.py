"""Starting a daemon waits until it listens, not until its socket file exists: the file
appears at bind(), a moment before listen(), when a connection is refused."""

from __future__ import annotations

import sys

import pytest

from nestbed.backend.sockets import SocketClient, start_daemon
from nestbed.errors import InternalError

# Binds, waits for a go-ahead file, then listens and answers one JSON line per connection.
DAEMON = """
import json, os, socket, sys, time
path, go = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
while not os.path.exists(go):
    time.sleep(0.01)
s.listen()
while True:
    conn, _ = s.accept()
    line = conn.makefile().readline()
    if line:
        conn.sendall(b'{"ok": true}\\n')
    conn.close()
"""


def test_a_daemon_that_has_bound_but_not_listened_is_waited_for(tmp_path):
    sock, go = tmp_path / "d.sock", tmp_path / "go"
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    # The go-ahead comes from a timer thread, while start_daemon already waits.
    import threading

    threading.Timer(0.3, go.touch).start()
    process = start_daemon([sys.executable, str(script), str(sock), str(go)], sock,
                           tmp_path / "d.log", "a test daemon", timeout_s=30, ping=False)  # fmt: skip
    try:
        assert go.exists()  # it returned only once the daemon listened
        with SocketClient(sock, "a test daemon", timeout=5) as client:
            assert client.request("ping") == {"ok": True}
    finally:
        process.kill()
        process.wait()


def test_a_daemon_that_ends_at_start_is_said_with_how_it_ended_and_its_last_words(tmp_path):
    said = ["sh", "-c", "echo 'cannot open /dev/nothing' >&2; exit 3"]
    with pytest.raises(InternalError, match=r"exited at start \(exit code 3\): cannot open"):
        start_daemon(said, tmp_path / "d.sock", tmp_path / "d.log", "a test daemon",
                     timeout_s=30, ping=False)  # fmt: skip
    silent = ["sh", "-c", "kill -KILL $$"]
    with pytest.raises(InternalError, match=r"exited at start \(killed by SIGKILL\): no output"):
        start_daemon(silent, tmp_path / "e.sock", tmp_path / "e.log", "a test daemon",
                     timeout_s=30, ping=False)  # fmt: skip
