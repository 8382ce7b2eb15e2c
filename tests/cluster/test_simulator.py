"""The controlling machine's side of a nestbed-sim on another host, without root or a
cluster: the files its tools write are named for the host and come back to their paths here
once the tool is done, and the host's side turns those names into files there; a simulated
link's change, handed to the host ahead of its time, reaches nestbed-sim at that time."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from nestbed.backend import sim
from nestbed.backend.cluster import simulator
from nestbed.backend.cluster.simulator import HOST_FILE, RemoteSimulator
from nestbed.errors import Refused


class _Host:
    """A host that answers like its agent: it records each command and, for a tool said
    done, gives back the files asked for."""

    def __init__(self) -> None:
        self.lines: list[list[str]] = []
        self.done = False

    def __call__(self, function: Any, line: list[str], fetch: list[str]) -> Any:
        assert function is simulator.request_on_host
        self.lines.append(line)
        if line[0] in ("state", "stop"):
            done = self.done or line[0] == "stop"
            return {"ok": True, "done": done}, ({n: n.encode() for n in fetch} if done else {})
        return {"ok": True}, {}


def _untimed(lines: list[str], due: float) -> float:
    raise AssertionError(f"no timed command here: {lines} at {due}")


def test_a_tools_files_are_named_for_the_host_and_copied_back_once_it_is_done(tmp_path):
    host = _Host()
    remote = RemoteSimulator(host, _untimed, 0.0)
    log, out = tmp_path / "my log.csv", tmp_path / "cbr0.recv"
    remote.request("udp-recv", "t1", "r1", 5000, sim.word(log), sim.word(out))
    (line,) = host.lines
    assert line[:4] == ["udp-recv", "t1", "r1", "5000"]
    assert line[4:] == [HOST_FILE + "t1-4", HOST_FILE + "t1-5"]  # no path of this machine
    assert remote.request("state", "t1") == {"ok": True, "done": False}
    assert not log.exists() and not out.exists()  # not before it is done
    host.done = True
    remote.request("state", "t1")
    assert (log.read_text(), out.read_text()) == ("t1-4", "t1-5")
    assert "t1" not in remote.files  # fetched once
    remote.request("stop", "t1")
    assert host.lines[-1] == ["stop", "t1"]


def test_the_host_side_writes_a_tools_files_in_the_experiments_state_folder(tmp_path, monkeypatch):
    """``request_on_host`` against a stand-in nestbed-sim on a Unix socket: the file words
    become paths in the state folder, and the files come back (and go) once done."""
    from nbtest import build
    from nestbed.backend import linux
    from nestbed.backend.plan import plan

    monkeypatch.setattr(linux, "RUN_DIR", tmp_path)
    p = plan(build("nodes: [{name: h1}]"))
    directory = linux.run_dir(p)
    directory.mkdir()
    said: list[str] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(directory / sim.SOCKET))
    server.listen(2)

    def serve() -> None:
        for _ in range(2):
            conn, _ = server.accept()
            with conn, conn.makefile("rw") as f:
                words = f.readline().split()
                said.append(" ".join(words))
                if words[0] == "udp-recv":
                    Path(unquote(words[5])).write_text("summary")
                f.write(json.dumps({"ok": True, "done": words[0] == "stop"}) + "\n")
                f.flush()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        reply, files = simulator.request_on_host(
            p, ["udp-recv", "t1", "r1", "5000", HOST_FILE + "t1-4", HOST_FILE + "t1-5"], []
        )
        assert (reply, files) == ({"ok": True, "done": False}, {})
        scratch = directory / simulator.SCRATCH
        assert said[0].split()[4:] == [sim.word(scratch / "t1-4"), sim.word(scratch / "t1-5")]
        reply, files = simulator.request_on_host(p, ["stop", "t1"], ["t1-4", "t1-5"])
        assert files == {"t1-5": b"summary"}  # the receiver got no datagram: no log
        assert not (scratch / "t1-5").exists()
    finally:
        thread.join(timeout=10)
        server.close()


def _stand_in(directory: Path, answer: dict) -> tuple[socket.socket, list[tuple[int, str]]]:
    """A nestbed-sim on the experiment's socket that answers every line with ``answer``,
    keeping each line and when it arrived (time.monotonic_ns())."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(directory / sim.SOCKET))
    server.listen()
    arrived: list[tuple[int, str]] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rw") as f:
            for line in f:
                arrived.append((time.monotonic_ns(), line.strip()))
                f.write(json.dumps(answer) + "\n")
                f.flush()

    threading.Thread(target=serve, daemon=True).start()
    return server, arrived


def _timed_on_host(tmp_path, monkeypatch, answer: dict, due_ns_from_now: int):  # type: ignore[no-untyped-def]
    """``request_on_host_at`` of two lines against a stand-in nestbed-sim: its result (or
    error), what arrived, and the time it was due."""
    from nbtest import build
    from nestbed.backend import linux
    from nestbed.backend.plan import plan

    monkeypatch.setattr(linux, "RUN_DIR", tmp_path)
    p = plan(build("nodes: [{name: h1}]"))
    linux.run_dir(p).mkdir()
    server, arrived = _stand_in(linux.run_dir(p), answer)
    due_ns = time.monotonic_ns() + due_ns_from_now
    lines = ["link l0 down", "link l1 down"]
    try:
        done: Any = asyncio.run(simulator.request_on_host_at(p, due_ns, lines))
    except Exception as exc:
        done = exc
    finally:
        server.close()
    return done, arrived, due_ns


def test_a_simulated_links_change_reaches_nestbed_sim_at_its_time_from_its_host(
    tmp_path, monkeypatch
):
    """nestbed-sim takes a command only as it arrives, so the host's agent, handed the change
    ahead, sends it then: no line arrives before its time."""
    done, arrived, due_ns = _timed_on_host(tmp_path, monkeypatch, {"ok": True}, 300_000_000)
    assert [line for _, line in arrived] == ["link l0 down", "link l1 down"]
    assert all(at_ns >= due_ns for at_ns, _ in arrived)
    assert done >= arrived[-1][0]  # answered once the last was carried out


def test_a_simulated_links_change_nestbed_sim_refuses_fails_with_its_reason(tmp_path, monkeypatch):
    done, arrived, _ = _timed_on_host(
        tmp_path, monkeypatch, {"ok": False, "error": "link: no link l0"}, 0
    )
    assert isinstance(done, Refused)
    assert str(done) == "the simulated part refused it: link: no link l0"
    assert [line for _, line in arrived] == ["link l0 down"]  # nothing after a refusal
