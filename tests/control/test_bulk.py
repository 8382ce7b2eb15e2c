"""The FTP agent's bulk transfer over loopback: sized sends are delivered whole, stops are
reported with what was done."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

BULK = [sys.executable, "-m", "nestbed.control.bulk"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_receiver(port: int) -> subprocess.Popen:
    """A receiver, once its port listens (seen with ss: a test connection would be the
    receiver's one connection)."""
    process = subprocess.Popen([*BULK, "recv", "--bind", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    for _ in range(500):
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                                   text=True).stdout  # fmt: skip
        if listening.strip():
            break
        time.sleep(0.01)
    return process


def test_a_sized_send_is_delivered_whole_and_counted_on_both_sides():
    port = free_port()
    recv = listening_receiver(port)
    send = subprocess.run([*BULK, "send", "--to", "127.0.0.1", "--port", str(port),
                           "--bytes", "5000000"], capture_output=True, text=True, timeout=30)  # fmt: skip
    sent = json.loads(send.stdout)
    got = json.loads(recv.communicate(timeout=30)[0])
    assert send.returncode == 0, send.stderr
    assert (sent["bytes"], sent["delivered"], sent["error"]) == (5_000_000, True, None)
    assert got["bytes"] == 5_000_000 and sum(got["intervals"]) == 5_000_000
    assert got["first_ns"] > 0 and got["seconds"] >= 0


def test_a_stopped_sender_reports_what_it_wrote_and_the_receiver_gets_all_of_it():
    port = free_port()
    recv = listening_receiver(port)
    send = subprocess.Popen([*BULK, "send", "--to", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    # Stopped once it has sent bytes (its handlers are installed before it connects), not
    # after a fixed time, which a loaded machine may spend starting Python.
    for _ in range(3000):
        info = subprocess.run(["ss", "-Htni", "state", "established", f"dport = :{port}"],
                              capture_output=True, text=True).stdout  # fmt: skip
        if "bytes_sent:" in info or send.poll() is not None:  # shown once non-zero
            break
        time.sleep(0.01)
    send.send_signal(signal.SIGINT)
    sent = json.loads(send.communicate(timeout=10)[0])
    got = json.loads(recv.communicate(timeout=10)[0])  # ends at the sender's close
    assert sent["bytes"] > 0 and not sent["delivered"] and sent["error"] is None
    assert got["bytes"] == sent["bytes"]  # nothing written is lost, nothing is counted twice


def test_a_sender_without_a_receiver_says_so_and_fails():
    port = free_port()
    send = subprocess.run([*BULK, "send", "--to", "127.0.0.1", "--port", str(port),
                           "--bytes", "10"], capture_output=True, text=True, timeout=30)  # fmt: skip
    assert send.returncode == 1
    assert "Connection refused" in json.loads(send.stdout)["error"]
