"""Exec and shell sessions through a real `nestbed serve` (``server.sessions``): on the Linux
back end (root, setpriv), `nestbed exec --server` runs a command in a node as the project's
identity, streams its output and passes its exit status on, and stops it at its timeout; a
shell over the WebSocket has a pty (its size, Ctrl-C, exit); another project's member and
a page of another site are refused. On the fake back end, an open session keeps the
experiment from being swapped out as idle, and once it ends the experiment idles; a user
has at most the server's --max-sessions open, across their projects, and a session's place
is free again however it ends."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import socket
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from server_helpers import LINE, Served, open_root, wait_for
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from nestbed.errors import UserError
from nestbed.server.confinement import PROJECT_ID_BASE

NET = "/v1/projects/net/experiments"
NAME = "i22x-sessions"
linux = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="runs a server on the Linux back end (root, setpriv)",
)


@pytest.fixture
def serve_backend(request: pytest.FixtureRequest) -> str:
    return "linux" if request.node.get_closest_marker("skipif") else "fake"


@pytest.fixture
def serve_root() -> Iterator[Path]:
    with open_root("i22x-", (f"net--{NAME}",)) as root:
        yield root


def _swapped_in(served: Served, token: str) -> None:
    ada = served.client(token)
    ada.request("PUT", f"{NET}/{NAME}", {"file_name": "line.yaml", "text": LINE})
    ada.request("POST", f"{NET}/{NAME}/swapin")
    assert wait_for(ada, f"{NET}/{NAME}", "swapin")["state"] == "active"


def _until(ws, wanted: bytes, seen: bytearray) -> bytes:
    """The session's output until ``wanted`` appears in it (the exit message fails it)."""
    while wanted not in seen:
        message = ws.recv(timeout=30)
        assert isinstance(message, bytes), f"{message} before {wanted!r} in {bytes(seen)!r}"
        seen += message[1:]
    return bytes(seen)


@dataclass
class Terminal:
    """A command of ours in a pty of 24 rows and 80 columns (as a person's terminal)."""

    process: subprocess.Popen
    master: int
    seen: bytearray = field(default_factory=bytearray)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def until(self, wanted: bytes) -> None:
        deadline = time.monotonic() + 30
        while wanted not in self.seen:
            assert time.monotonic() < deadline, f"no {wanted!r} in {bytes(self.seen)!r}"
            if select.select([self.master], [], [], 1)[0]:
                self.seen += os.read(self.master, 65536)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


def _in_a_terminal(served: Served, env: dict[str, str], args: list[str]) -> Terminal:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        process = subprocess.Popen([sys.executable, "-m", "nestbed", *args], stdin=slave,
                                   stdout=slave, stderr=slave, env=served.env(**env),
                                   cwd=served.root, start_new_session=True)  # fmt: skip
    finally:
        os.close(slave)
    return Terminal(process, master)


@linux
def test_exec_and_shell_run_in_the_node_as_the_project(served, people):
    _swapped_in(served, people["ada"])
    with contextlib.closing(sqlite3.connect(served.db)) as db:
        net_uid = PROJECT_ID_BASE + dict(db.execute("SELECT name, id FROM projects"))["net"]
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["cy"], "NESTBED_PROJECT": "net"}
    try:
        # exec: output on stdout and stderr as the command wrote them, its exit status ours;
        # in node a's network (b is its peer across link0), as net's identity, no capability.
        script = ("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; echo oops >&2; "
                  "ping -c 1 -W 5 b > /dev/null && echo reached b; pwd; exit 3")  # fmt: skip
        done = served.nestbed("exec", NAME, "a", "--", "sh", "-c", script, **env)
        assert done.returncode == 3, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == str(net_uid) and "reached b" in lines, done.stdout
        assert "CapEff:\t0000000000000000" in lines and "NoNewPrivs:\t1" in lines
        assert lines[-1].endswith("/work/a"), done.stdout  # the node's working folder
        assert done.stderr == "oops\n"
        # Its input is ours when piped; a timeout stops it (124, as timeout(1)).
        empty = served.nestbed("exec", NAME, "b", "--", "wc", "-l", **env)
        assert empty.returncode == 0 and empty.stdout.strip() == "0"
        many = 3 * 2**20  # more than any pipe holds: the command reads it as it comes
        argv = [sys.executable, "-m", "nestbed", "exec", NAME, "b", "--", "wc", "-c"]
        piped = subprocess.run(argv, input=b"x" * many, capture_output=True, timeout=120,
                               env=served.env(**env), cwd=served.root)  # fmt: skip
        assert piped.returncode == 0 and piped.stdout.strip() == str(many).encode(), piped
        slow = served.nestbed("exec", "--timeout", "1", NAME, "a", "--", "sleep", "60", **env)
        assert slow.returncode == 124 and "ran out of its 1 s" in slow.stderr, slow.stderr
        missing = served.nestbed("exec", NAME, "z", "--", "true", **env)
        assert missing.returncode != 0 and "has no node 'z'" in missing.stderr

        # shell: a pty of the size asked, then resized; Ctrl-C stops the foreground command
        # and the shell goes on; exit ends the session with the shell's status.
        client = served.client(people["ada"])
        with client.session("net", NAME, "a") as ws:
            ws.send(json.dumps({"tty": True, "cols": 91, "rows": 17}))
            seen = bytearray()
            ws.send(b"id -u; stty size\n")
            _until(ws, f"{net_uid}\r\n17 91".encode(), seen)
            ws.send(json.dumps({"resize": [120, 40]}))
            ws.send(b"stty size; sleep 60\n")
            _until(ws, b"40 120", seen)
            time.sleep(0.5)
            ws.send(b"\x03")
            ws.send(b"echo after-$?\n")
            _until(ws, b"after-130", seen)
            ws.send(b"exit 7\n")
            while isinstance(last := ws.recv(timeout=30), bytes):
                pass
            assert json.loads(last) == {"exit": 7}

        # Output comes as it is written, not at the command's end; a client that leaves
        # ends the command.
        with served.client(people["ada"]).session("net", NAME, "a") as ws:
            ws.send(json.dumps({"argv": ["sh", "-c", "echo first; exec sleep 600"]}))
            assert ws.recv(timeout=30) == b"\x01first\n"
        # `nestbed shell` in a terminal: raw mode, the node's shell in a pty of the
        # terminal's size; Ctrl-C goes to the node, exit's status is the command's.
        shell = _in_a_terminal(served, env, ["shell", NAME, "b"])
        try:
            shell.until(b"$ ")  # the node's shell's prompt
            shell.type(b"stty size; id -u\n")
            shell.until(f"24 80\r\n{net_uid}".encode())
            shell.type(b"sleep 60\n")
            time.sleep(0.5)
            shell.type(b"\x03echo back-$?\n")
            shell.until(b"back-130")
            shell.type(b"exit 4\n")
            assert shell.process.wait(60) == 4
        finally:
            shell.close()

        # Another project's leader is refused as on every route (404: no such project for
        # them), and a page of another site with a portal session cookie never opens one.
        bob = served.client(people["bob"])
        with bob.session("net", NAME, "a") as ws:
            ws.send(json.dumps({"argv": ["id"]}))
            refused = json.loads(ws.recv(timeout=30))
        assert refused["status"] == 404 and "no project 'net'" in refused["error"], refused
        with pytest.raises(UserError, match="no project 'net'"):
            bob.request("GET", f"{NET}/{NAME}")
        url = served.url.replace("http", "ws") + f"{NET}/{NAME}/nodes/a/session"
        cookie = {"Cookie": f"nestbed_session={people['ada']}"}
        with pytest.raises(InvalidStatus) as denied:
            connect(url, additional_headers=cookie, origin="http://evil.example")
        assert denied.value.response.status_code == 403
        with pytest.raises(InvalidStatus) as anonymous:
            connect(url)
        assert anonymous.value.response.status_code == 401
        audit = served.client(people["ada"]).request("GET", "/v1/projects/net/audit")
        said = [(r["actor"], r["action"], r["outcome"]) for r in audit if "session" in r["action"]]
        assert ("cy", "session", "ok: node a: exec sleep 60") in said, said
        assert ("cy", "session.end", "node a: exec sleep 60: exit 137 (timed out)") in [
            (a, b, c.rsplit(" after ", 1)[0]) for a, b, c in said
        ]
        assert ("ada", "session.end", "node a: shell: exit 7") in [
            (a, b, c.rsplit(" after ", 1)[0]) for a, b, c in said
        ]
        assert any(a == "bob" and o.startswith("denied:") for a, _, o in said), said
        left = "node a: exec sh -c 'echo first; exec sleep 600': exit 137 (the client left)"
        assert ("ada", "session.end", left) in [(a, b, c.rsplit(" after ", 1)[0])
                                                 for a, b, c in said]  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            served.client(people["ada"]).request("POST", f"{NET}/{NAME}/swapout")
            wait_for(served.client(people["ada"]), f"{NET}/{NAME}", "swapout")


@pytest.mark.parametrize("serve_options", [("--tick-s", "0.2")])
def test_an_open_session_keeps_the_experiment_from_idling(served, people):
    ada = served.client(people["ada"])
    ada.request("POST", NET, {"file_name": "line.yaml", "text": LINE, "name": NAME})
    ada.request("POST", f"{NET}/{NAME}/swapin")
    assert wait_for(ada, f"{NET}/{NAME}", "swapin")["state"] == "active"
    # The session opens under the server's default idle time (hours), so however long a
    # loaded machine takes to start it, the experiment cannot idle out before; once its
    # command echoes, the session is open for every sample. Only then does the project's
    # idle time drop to 1 s (swapped out within 1.5 s of that if the session did not hold
    # it, its idle time counted from the first sample): the open session holds it for 4 s.
    with ada.session("net", NAME, "a") as ws:
        ws.send(json.dumps({"argv": ["cat"]}))  # reads its input until the session ends
        ws.send(b"open\n")
        assert ws.recv(timeout=30) == b"\x01open\n"
        ada.request("PATCH", "/v1/projects/net/settings", {"idle_s": 1, "warn_before_s": 0.5})
        for _ in range(8):
            time.sleep(0.5)
            assert ada.request("GET", f"{NET}/{NAME}")["state"] == "active"
    for _ in range(600):  # ended, the session no longer holds it: it idles out
        if ada.request("GET", f"{NET}/{NAME}")["state"] == "swapped":
            break
        time.sleep(0.1)
    assert ada.request("GET", f"{NET}/{NAME}")["state"] == "swapped"
    actions = [r["action"] for r in ada.request("GET", "/v1/projects/net/audit")]
    assert actions[-6:] == ["session", "settings.set", "session.end", "idle.warn",
                            "idle.swapout", "swapout.end"], actions  # fmt: skip


@contextlib.contextmanager
def _open_cat(client, project: str) -> Iterator:
    """A session of ``cat`` in node a, once its echo shows it open."""
    with client.session(project, NAME, "a") as ws:
        ws.send(json.dumps({"argv": ["cat"]}))
        ws.send(b"open\n")
        assert ws.recv(timeout=30) == b"\x01open\n"
        yield ws


def _last(client, project: str, start: dict) -> dict:
    """The one text message of a session that starts as ``start`` and ends at once."""
    with client.session(project, NAME, "b") as ws:
        ws.send(json.dumps(start))
        while isinstance(message := ws.recv(timeout=30), bytes):
            pass
        return json.loads(message)


def _audited_end(client, how: str) -> None:
    """Until the audit has a session's end that says ``how`` (the server frees its place
    before it writes that row)."""
    for _ in range(600):
        rows = client.request("GET", "/v1/projects/net/audit")
        if any(r["action"] == "session.end" and how in r["outcome"] for r in rows):
            return
        time.sleep(0.1)
    raise AssertionError(f"no session.end {how!r} in the audit")


@pytest.mark.parametrize("serve_options", [("--max-sessions", "2")])
def test_a_user_has_at_most_the_servers_limit_of_sessions_open(served, people):
    ada, cy = served.client(people["ada"]), served.client(people["cy"])
    _swapped_in(served, people["ada"])  # net's, and web's with ada a member of both
    served.client(people["bob"]).request("PUT", "/v1/projects/web/members/ada", {"role": "member"})
    web = "/v1/projects/web/experiments"
    ada.request("PUT", f"{web}/{NAME}", {"file_name": "line.yaml", "text": LINE})
    ada.request("POST", f"{web}/{NAME}/swapin")
    assert wait_for(ada, f"{web}/{NAME}", "swapin")["state"] == "active"

    # Two open, one in each project: a third anywhere is refused before it starts, with 429
    # and the sentence; the CLI says that sentence alone and fails.
    sessions = contextlib.ExitStack()
    first = sessions.enter_context(_open_cat(ada, "net"))
    sessions.enter_context(_open_cat(ada, "web"))
    refused = _last(ada, "net", {"argv": ["touch", str(served.root / "i22g-started")]})
    sentence = ("user 'ada' already has 2 exec or shell sessions open (across all their "
                "projects), the most this server allows one user (nestbed serve "
                "--max-sessions 2); end one of them, or ask the server's admin to raise "
                "--max-sessions")  # fmt: skip
    assert refused == {"error": sentence, "status": 429}
    assert not (served.root / "i22g-started").exists()
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"], "NESTBED_PROJECT": "web"}
    for args in (("exec", NAME, "a", "--", "true"), ("shell", NAME, "a")):
        done = served.nestbed(*args, **env)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {sentence}\n")
    # Another user is not affected.
    with _open_cat(cy, "net"):
        pass

    # A command that exits frees its place: the next opens.
    first.send(json.dumps({"eof": True}))
    assert json.loads(first.recv(timeout=30)) == {"exit": 0}
    third = sessions.enter_context(_open_cat(ada, "net"))
    assert _last(ada, "web", {"argv": ["true"]})["status"] == 429
    # A client gone without a clean close frees its place.
    third.socket.shutdown(socket.SHUT_RDWR)
    third.socket.close()
    _audited_end(ada, "exec cat: exit 137 (the client left)")
    # A timeout frees its place.
    assert _last(ada, "net", {"argv": ["sleep", "600"], "timeout_s": 0.5}) == {
        "exit": 137, "timed_out": True}  # fmt: skip
    # A command that cannot start (the server's error) holds none: not 429 the second time.
    for _ in range(2):
        failed = _last(ada, "net", {"argv": [str(served.root / "i22g-no-such-command")]})
        assert failed["status"] == 503, failed
    with _open_cat(ada, "net"):
        assert _last(ada, "net", {"argv": ["true"]})["status"] == 429
    sessions.close()

    audit = ada.request("GET", "/v1/projects/net/audit")
    said = [(r["actor"], r["action"], r["outcome"]) for r in audit]
    assert ("ada", "session", f"refused: {sentence}") in said, said
