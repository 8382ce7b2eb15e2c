"""Live experiments from Python and from the command line: commands, dynamic events, status;
teardown on exceptions; a killed controller; cleanup that spares what nestbed did not make;
two experiments at once that cannot reach each other."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from machine import left

import nestbed
from nestbed.backend import linux
from nestbed.backend.plan import experiment_tag, fabric_namespace
from nestbed.errors import UserError
from nestbed.store import State

pytestmark = pytest.mark.root


def _line(name: str, *, delay: str = "10ms") -> nestbed.Experiment:
    exp = nestbed.Experiment(name)
    a, r, b = exp.node("a"), exp.node("r"), exp.node("b")
    exp.link(a, r, name="link0", delay=delay)
    exp.link(r, b, name="link1")
    exp.routing("static")
    return exp


def _rtt_ms(live, node: str, target: str) -> float:
    """The shortest of three round trips: the links' delay is its floor, and a loaded
    machine only adds to the others."""
    done = live.exec(node, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target])
    assert done.ok, done.stdout + done.stderr
    return float(re.search(r"= ([\d.]+)/", done.stdout).group(1))


def test_python_session_exec_events_status(store, tmp_path):
    name = f"live{os.getpid()}"
    with nestbed.swapin(_line(name), store=store, results=tmp_path / "r") as live:
        assert store.get(name).state == State.ACTIVE
        done = live.exec("a", "echo out; echo err >&2; exit 4")
        assert (done.returncode, done.stdout, done.stderr) == (4, "out\n", "err\n")
        before = _rtt_ms(live, "a", "b")
        assert 20 <= before < 40  # link0 is 10 ms each way
        row = live.event("link0", "delay", "50ms")
        assert row["outcome"] == "ok"
        assert _rtt_ms(live, "a", "b") >= 100
        live.event("link0", "reset")
        assert _rtt_ms(live, "a", "b") < 40
        live.event("link0", "down")
        assert not live.exec("a", ["ping", "-c", "1", "-W", "1", "b"]).ok
        live.event("link0", "up")
        with pytest.raises(UserError, match="no object named 'nosuch'"):
            live.event("nosuch", "down")
        with pytest.raises(UserError, match="valid verbs are bandwidth, delay, down"):
            live.event("link0", "explode")
        with pytest.raises(UserError, match="is not emulated"):
            live.event("link1", "down")
        status = live.status()
        assert status["links"] == {"link0": "up", "link1": "up"}
        assert {c["port"] for c in status["link_counters"]} == {"a", "r"}
        results = live.results
    assert store.get(name).state == State.SWAPPED
    events = (results / "events.csv").read_text()
    assert ",link0,delay,50ms,ok," in events and ",link1,down,,error," in events
    assert json.loads((results / "manifest.json").read_text())["outcome"] == "completed"


def test_an_exception_in_the_block_still_swaps_out(store, tmp_path):
    name = f"boom{os.getpid()}"
    with (
        pytest.raises(RuntimeError, match="inside"),
        nestbed.swapin(_line(name), store=store, results=tmp_path / "r"),
    ):
        raise RuntimeError("inside the block")
    assert store.get(name).state == State.SWAPPED
    prefix = fabric_namespace(experiment_tag(name))
    assert not [n for n in linux.leftovers() if n.startswith(prefix)]


def test_a_node_that_deletes_its_own_interfaces_still_swaps_out(store, tmp_path):
    name = f"self{os.getpid()}"
    with nestbed.swapin(_line(name), store=store, results=tmp_path / "r") as live:
        assert live.exec("r", "ip link delete eth0 && ip link delete eth1").ok
        assert not live.exec("a", ["ping", "-c", "1", "-W", "1", "b"]).ok
        assert live.status()["links"]["link0"] == "up"  # the controller still answers
    assert store.get(name).state == State.SWAPPED


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NESTBED_DB=str(tmp_path / "cli.db"), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "nestbed", *args],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip


def _file(tmp_path, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        "routing: static\nnodes: [{name: a}, {name: b}]\n"
        "links: [{name: link0, members: [a, b], delay: 5ms}]\n"
    )
    return str(path)


def test_killing_the_controller_then_cleanup_leaves_the_machine_as_before(tmp_path):
    name = f"kill{os.getpid()}"
    assert _cli(tmp_path, "swapin", _file(tmp_path, name), "--results", "r").returncode == 0
    pid = int((linux.RUN_DIR / name / "controller.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    status = _cli(tmp_path, "status", name)
    assert status.returncode == 2 and "controller of experiment" in status.stderr
    done = _cli(tmp_path, "cleanup", name)
    assert done.returncode == 0, done.stderr
    assert f"experiment {name} was cleaned up" in done.stdout
    assert left(name) == []  # (others may come and go on a shared machine meanwhile)
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["outcome"] == "failed" and "controller was lost" in manifest["reason"]


def test_cleanup_spares_a_foreign_namespace_and_bridge(tmp_path):
    foreign = f"nb-foreign{os.getpid()}"  # nestbed's prefix, but not nestbed's
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    bridge = f"fbr{os.getpid()}"[:15]
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    try:
        name = f"spare{os.getpid()}"
        assert _cli(tmp_path, "swapin", _file(tmp_path, name), "--results", "r").returncode == 0
        done = _cli(tmp_path, "cleanup", name, "--all", "--yes")
        assert done.returncode == 0, done.stderr
        assert (
            foreign
            in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        )
        assert subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode == 0
        assert name not in " ".join(linux.traces())
    finally:
        subprocess.run(["ip", "netns", "delete", foreign], check=False)
        subprocess.run(["ip", "link", "delete", bridge], check=False)


def test_two_experiments_at_once_are_isolated(store, tmp_path):
    one, two = f"iso1x{os.getpid()}", f"iso2x{os.getpid()}"
    with (
        nestbed.swapin(_line(one), store=store, results=tmp_path / "1") as first,
        nestbed.swapin(_line(two), store=store, results=tmp_path / "2") as second,
    ):
        # Both use the same addresses (10.1.1.0/24, 10.1.2.0/24) in their own namespaces.
        assert _rtt_ms(first, "a", "b") > 0 and _rtt_ms(second, "a", "b") > 0
        listen = (
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "s.bind(('0.0.0.0', 9999)); s.settimeout(3); print(s.recv(100).decode())"
        )
        here, there = (
            linux.start_in(live.plan, "b", [sys.executable, "-c", listen],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            for live in (first, second)
        )  # fmt: skip
        time.sleep(0.5)
        send = (
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "s.sendto(b'hello', ('10.1.2.3', 9999))"
        )
        assert first.exec("a", [sys.executable, "-c", send]).ok
        # The same address exists in both; the datagram reaches the first's b only.
        assert here.communicate()[0] == b"hello\n"
        assert there.communicate()[0] == b""
        second.event("link0", "down")
        assert _rtt_ms(first, "a", "b") > 0  # an event in one does not touch the other
