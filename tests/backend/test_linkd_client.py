"""The Linux back end's client of nestbed-linkd (``LinkdClient``) without root: against a
stand-in daemon on a Unix socket that answers ``at`` when the test lets it, so that a timed
change's wait is seen to hold only its own connection."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nestbed.backend.linkd import LinkdClient, TimedChannel
from nestbed.errors import InternalError

WAIT_S = 30.0  # only a bound on a hung test


class StandIn:
    """A daemon speaking linkd's JSON lines, a thread per connection: ``at`` is answered
    once ``release`` is set, as applied 1234 ns after its time; ``nope`` is refused."""

    def __init__(self, path: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.release = threading.Event()
        self.asked: list[dict[str, Any]] = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rw") as f:
            for line in f:
                request = json.loads(line)
                self.asked.append(request)
                if request["op"] == "at":
                    self.release.wait()
                    reply = {"ok": True, "applied_ns": request["at_ns"] + 1234}
                elif request["op"] == "nope":
                    reply = {"ok": False, "error": "unknown op"}
                else:
                    reply = {"ok": True, "now_ns": time.monotonic_ns()}
                f.write(json.dumps(reply) + "\n")
                f.flush()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def linkd(tmp_path: Path):
    standin = StandIn(tmp_path / "linkd.sock")
    yield standin
    standin.release.set()
    standin.close()


def test_a_timed_change_is_sent_with_its_time_and_its_answer_is_when_linkd_applied_it(
    linkd: StandIn, tmp_path: Path
):
    client = LinkdClient(tmp_path / "linkd.sock")
    assert isinstance(client, TimedChannel)
    linkd.release.set()
    due = time.monotonic() + 0.5
    applied = client.request_at(due, [("down", {"link": "l0", "mode": "blackhole"})])
    (asked,) = linkd.asked
    assert asked == {"op": "at", "at_ns": math.ceil(due * 1e9),
                     "requests": [{"op": "down", "link": "l0", "mode": "blackhole"}]}  # fmt: skip
    # linkd's answer, not when this process asked or heard back
    assert applied == (asked["at_ns"] + 1234) / 1e9
    assert client.request_at(due, []) == due and len(linkd.asked) == 1  # nothing to apply
    client.close()


def test_other_requests_and_timed_changes_go_on_while_one_waits_for_its_time(
    linkd: StandIn, tmp_path: Path
):
    client = LinkdClient(tmp_path / "linkd.sock")
    answers: list[float] = []
    waiting = [
        threading.Thread(target=lambda: answers.append(client.request_at(
            time.monotonic() + 1, [("up", {"link": "l0"})]))) for _ in range(2)
    ]  # fmt: skip
    for thread in waiting:
        thread.start()
    deadline = time.monotonic() + WAIT_S
    while len(linkd.asked) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(linkd.asked) == 2  # both timed changes reached linkd, neither answered
    # Served meanwhile: on one connection (before, every request waited its turn on one).
    assert client.request("counters")["ok"]
    assert not answers
    linkd.release.set()
    for thread in waiting:
        thread.join(WAIT_S)
    assert len(answers) == 2
    assert linkd.connections == 3  # the first, opened at once, and one for each waiting
    client.request("counters")  # on a connection kept from before
    assert linkd.connections == 3
    client.close()


def test_a_refused_request_says_so_and_the_next_goes_on_a_new_connection(
    linkd: StandIn, tmp_path: Path
):
    client = LinkdClient(tmp_path / "linkd.sock")
    with pytest.raises(InternalError, match="unknown op"):
        client.request("nope")
    assert client.request("counters")["ok"]
    assert linkd.connections == 2
    client.close()
    with pytest.raises(InternalError, match="closed"):
        client.request("counters")


def test_a_linkd_that_does_not_listen_is_an_os_error_at_once(tmp_path: Path):
    with pytest.raises(OSError):
        LinkdClient(tmp_path / "nobody.sock")
