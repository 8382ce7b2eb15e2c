"""Projects kept apart on the machine (root, a real `nestbed serve` on the Linux back end):
a program of project net's experiment tries to read the server's store, list /run/nestbed,
read project web's results, signal web's program, enter web's node and get root back through
a setuid binary; each attempt fails, and its own output says it tried. The same program
reaches its peer node over UDP, binds port 80, pings, and writes its folder; its project's
traffic tool runs confined too; its output lands in net's results."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_helpers import Served, wait_for

from nestbed.binaries import built_binary
from nestbed.results.drawing import wait_drawn
from nestbed.results.folder import RunFolder
from nestbed.server.confinement import PROJECT_ID_BASE, closed_to_others

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="runs a server on the Linux back end (root, setpriv)",
)

NET = "/v1/projects/net/experiments"
WEB = "/v1/projects/web/experiments"
PROBE, VICTIM = "i22d-probe", "i22d-victim"  # net's and web's experiments

# Each attempt prints "NAME: reached" or "NAME: refused" (and what it said on a refusal).
ATTEMPTS = r"""
try() {
    name=$1; shift
    if said=$("$@" 2>&1); then echo "$name: reached"; else echo "$name: refused: $said"; fi
}
store=$1 run_dir=$2 web_results=$3 web_secret=$4 web_pid=$5 web_netns=$6 setuid_id=$7
echo "uid: $(id -u) groups: $(id -G)"
grep -E '^(CapPrm|CapEff|CapBnd|NoNewPrivs)' /proc/self/status
try store cat "$store"
try run_dir ls "$run_dir"
try web_results ls "$web_results"
try web_secret cat "$web_secret"
try web_kill kill -TERM "$web_pid"
try web_environ cat "/proc/$web_pid/environ"
try web_nsenter nsenter "--net=/run/netns/$web_netns" true
try web_ip_netns_exec ip netns exec "$web_netns" true
try setuid sh -c "euid=\$($setuid_id -u); echo euid \$euid; test \$euid = 0"
try su su -c true root
try raw_socket /usr/bin/python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)"
try run_folder_write touch ../../intruder
try bind_80 /usr/bin/python3 -c "import socket; socket.socket().bind(('0.0.0.0', 80))"
try udp_to_peer /usr/bin/python3 -c "
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(20):
    s.sendto(b'i22d-hello', ('b', 9999)); time.sleep(0.1)"
try ping_peer ping -c 1 -W 5 b
try own_write sh -c 'echo mine > out.txt'
"""

LISTEN = (
    '/usr/bin/python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
    "s.bind(('0.0.0.0', 9999)); s.settimeout(30); print(s.recvfrom(100)[0].decode())\""
)


def _experiment(programs: list[dict], events: list[dict], **more: object) -> str:
    """A two-node experiment file (YAML, written as JSON)."""
    return json.dumps({
        "routing": "static",
        "nodes": [{"name": "a"}, {"name": "b", "startcmd": "id -u; pwd"}],
        "links": [{"name": "l0", "members": ["a", "b"], "delay": "2ms"}],
        "programs": programs, "events": events, **more,
    })  # fmt: skip


@pytest.fixture
def serve_backend() -> str:
    return "linux"


@pytest.fixture
def serve_root() -> Iterator[Path]:
    """A folder every user may enter (unlike pytest's, 0700), as a server's /var/lib/nestbed
    is: only the modes nestbed gives its files keep the programs out. At the end, after the
    server's stop, whatever of the test's experiments is left is cleaned up."""
    root = Path(tempfile.mkdtemp(prefix="i22d-"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        for run in root.glob("results/*/*"):
            wait_drawn(run)  # a detached process draws a run's report after it
        server = Served(root, backend="linux")
        for name in (f"net--{PROBE}", f"web--{VICTIM}"):
            server.nestbed("--db", str(server.db), "cleanup", "--all", "--yes", name)
        shutil.rmtree(root, ignore_errors=True)


def _pid_of(uid: int, command: str, programs: Path) -> int:
    """The process of ``uid`` whose command line starts with ``command`` (waits for it; the
    programs' output in ``programs`` says why it is not there)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if proc.stat().st_uid == uid and (proc / "cmdline").read_bytes().startswith(
                    command.encode() + b"\0"
                ):
                    return int(proc.name)
        time.sleep(0.1)
    said = {p.name: p.read_text() for p in programs.glob("*.std*")}
    raise AssertionError(f"no process {command!r} of uid {uid}; the programs said {said}")


def test_a_projects_program_reaches_nothing_of_another_project_nor_the_server(served, people):
    ada, bob = served.client(people["ada"]), served.client(people["bob"])
    with contextlib.closing(sqlite3.connect(served.db)) as db:
        ids = dict(db.execute("SELECT name, id FROM projects").fetchall())
    net_uid, web_uid = PROJECT_ID_BASE + ids["net"], PROJECT_ID_BASE + ids["web"]
    setuid_id = served.root / "bin" / "id"  # a setuid-root copy of id(1)
    setuid_id.parent.mkdir(mode=0o755)
    shutil.copy("/usr/bin/id", setuid_id)
    setuid_id.chmod(0o4755)
    # The copy does give root on this file system to a process that may gain privileges.
    unconfined = subprocess.run(["setpriv", f"--reuid={net_uid}", f"--regid={net_uid}",
                                 "--clear-groups", str(setuid_id), "-u"],
                                capture_output=True, text=True, check=True)  # fmt: skip
    assert unconfined.stdout == "0\n"
    attempts = served.root / "bin" / "attempts.sh"
    attempts.write_text(ATTEMPTS)
    attempts.chmod(0o644)
    try:
        # web's experiment: a program that keeps a secret in its folder and goes on running.
        victim = _experiment(
            [{"name": "keeper", "node": "a",
              "command": "echo web-secret > secret.txt && exec sleep 600"}],
            [{"at": 0, "object": "keeper", "verb": "start"}],
        )  # fmt: skip
        bob.request("PUT", f"{WEB}/{VICTIM}", {"file_name": "v.yaml", "text": victim})
        bob.request("POST", f"{WEB}/{VICTIM}/swapin")
        live = wait_for(bob, f"{WEB}/{VICTIM}", "swapin")["live"]
        web_netns = next(n["namespace"] for n in live["nodes"] if n["node"] == "a")
        [web_run] = (served.root / "results" / "web").iterdir()
        web_pid = _pid_of(web_uid, "sleep", RunFolder(web_run).programs)
        web_secret = RunFolder(web_run).work("a") / "secret.txt"
        assert web_secret.read_text() == "web-secret\n"

        # net's experiment tries everything from node a, with a CBR flow from a to b.
        args = [served.db, "/run/nestbed", served.root / "results" / "web", web_secret,
                web_pid, web_netns, setuid_id]  # fmt: skip
        probe = _experiment(
            [{"name": "listen", "node": "b", "command": LISTEN},
             {"name": "attempts", "node": "a",
              "command": " ".join(["sh", str(attempts), *map(str, args)])}],
            [{"at": 0, "object": "listen", "verb": "start"},
             {"at": 0.1, "object": "cbr0", "verb": "start"},
             {"at": 0.5, "object": "attempts", "verb": "start"},
             {"at": 1.5, "object": "cbr0", "verb": "stop"}],
            agents=[{"name": "udp0", "type": "udp", "node": "a", "peer": "null0"},
                    {"name": "null0", "type": "null", "node": "b", "peer": "udp0"}],
            applications=[{"name": "cbr0", "type": "cbr", "agent": "udp0",
                           "packet_size": 200, "rate": "100kb"}],
        )  # fmt: skip
        ada.request("PUT", f"{NET}/{PROBE}", {"file_name": "p.yaml", "text": probe})
        ada.request("POST", f"{NET}/{PROBE}/run", {"duration_s": 12})
        wait_for(ada, f"{NET}/{PROBE}", "run")
        os.kill(web_pid, 0)  # web's program still runs
    finally:
        with contextlib.suppress(Exception):
            bob.request("POST", f"{WEB}/{VICTIM}/swapout")
            wait_for(bob, f"{WEB}/{VICTIM}", "swapout")

    [net_run] = (served.root / "results" / "net").iterdir()
    folder = RunFolder(net_run)
    said = (folder.programs / "attempts.stdout").read_text()
    lines = said.splitlines()
    outcome = {line.split(": ")[0]: line.split(": ")[1] for line in lines
               if line.split(": ")[1:2] in (["reached"], ["refused"])}  # fmt: skip
    # Its own identity, no supplementary group, no capability, no way to gain one.
    assert lines[0] == f"uid: {net_uid} groups: {net_uid}", said
    assert "CapPrm:\t0000000000000000" in said and "CapEff:\t0000000000000000" in said
    assert "CapBnd:\t0000000000002000" in said  # CAP_NET_RAW alone, for ping to start
    assert "NoNewPrivs:\t1" in said
    refused = ("store", "run_dir", "web_results", "web_secret", "web_kill", "web_environ",
               "web_nsenter", "web_ip_netns_exec", "setuid", "su", "raw_socket",
               "run_folder_write")  # fmt: skip
    reached = ("bind_80", "udp_to_peer", "ping_peer", "own_write")
    assert {k: outcome[k] for k in refused} == dict.fromkeys(refused, "refused"), said
    assert {k: outcome[k] for k in reached} == dict.fromkeys(reached, "reached"), said
    assert f"setuid: refused: euid {net_uid}" in said
    # What it tried left web's program and secret alone, and nothing of its own outside its
    # folder; what it wrote is in net's results.
    assert not (net_run / "intruder").exists()
    assert (folder.work("a") / "out.txt").read_text() == "mine\n"
    assert (folder.programs / "listen.stdout").read_text() == "i22d-hello\n"
    # A node's start command is the experiment's too.
    started = (folder.programs / "startcmd-b.stdout").read_text()
    assert started == f"{net_uid}\n{folder.work('b')}\n"
    assert stat.S_IMODE(served.db.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path("/run/nestbed").stat().st_mode) == 0o700
    web_folder = served.root / "results" / "web"
    assert (web_folder.stat().st_uid, web_folder.stat().st_gid) == (0, web_uid)
    assert stat.S_IMODE(web_folder.stat().st_mode) == 0o750
    # The traffic tools ran as net's too, and measured: where nestbed's binaries are open to
    # other users (a checkout inside a folder closed to others keeps them from the project's
    # identity, as the server's log warns).
    with folder.flows.open() as f:
        [cbr] = csv.DictReader(f)
    if closed_to_others(built_binary("nestbed-probe")) is None:
        assert int(cbr["packets_received"]) > 0, cbr
