"""The server's exec sessions reach a node on another host: a real `nestbed serve` whose back
end is the simulated cluster runs `nestbed exec --server` in a node there as the project's
identity, in the node's working folder on its host, with its input streamed to it through the
host's agent as it is written, and ended there at its timeout; a terminal session is refused
in one sentence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from simulated import processes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_helpers import LINE, Served, wait_for

pytestmark = pytest.mark.root

NET = "/v1/projects/net/experiments"


def test_an_exec_session_reaches_a_node_on_another_host_with_its_input(
    simulated_cluster, monkeypatch
):
    machines, agents = simulated_cluster
    monkeypatch.setenv("NESTBED_CLUSTER", agents.address)
    monkeypatch.setenv("NESTBED_RUN_DIR", str(machines.run_dir("controller")))
    name = f"i21ksess{os.getpid()}"
    root = Path(tempfile.mkdtemp(prefix="i21k-serve-"))
    root.chmod(0o711)  # as a server's /var/lib/nestbed: the identities reach their folders
    server = Served(root, backend="cluster")
    made = server.nestbed("serve", "--store", server.store, "--init-admin", "root")
    assert made.returncode == 0, made.stderr
    server.admin_token = made.stdout.strip().splitlines()[-1]
    server.start()
    ada = None
    try:
        admin = server.client(server.admin_token)
        token = admin.request("POST", "/v1/users", {"name": "ada"})["token"]
        admin.request("POST", "/v1/projects", {"name": "net", "leader": "ada"})
        ada = server.client(token)
        ada.request("PUT", f"{NET}/{name}", {"file_name": "line.yaml", "text": LINE})
        ada.request("POST", f"{NET}/{name}/swapin")
        assert wait_for(ada, f"{NET}/{name}", "swapin")["state"] == "active"
        env = {"NESTBED_SERVER": server.url, "NESTBED_TOKEN": token, "NESTBED_PROJECT": "net"}
        # A line is read before the input ends, then the rest: more than a pipe, a poll
        # round or the host's store of input hold at once.
        many = 3 * 2**20
        script = 'read line; echo "got $line"; pwd; id -u; wc -c'
        argv = [sys.executable, "-m", "nestbed", "exec", name, "b", "--", "sh", "-c", script]
        piped = subprocess.run(argv, input=b"hello\n" + b"x" * many, capture_output=True,
                               timeout=300, env=server.env(**env), cwd=root)  # fmt: skip
        assert piped.returncode == 0, piped.stdout + piped.stderr
        got, pwd, uid, count = piped.stdout.decode().splitlines()
        print(f"exec in b on another host: {got!r}, in {pwd} as {uid}, {count} bytes read")
        assert got == "got hello"
        assert int(count) == many
        assert int(uid) != 0  # the project's identity
        # In b's working folder on its host, made there for the run's (the session's HOME).
        hosts = {h: machines.work_dir(h) for h in machines.hosts}
        assert any(Path(pwd).is_relative_to(folder / f"net--{name}") for folder in hosts.values())
        assert Path(pwd).name == "b"
        # Its timeout ends it there, through its host's agent (its pid is the host's).
        slow = server.nestbed("exec", "--timeout", "1", name, "b", "--", "sleep", "61", **env)
        assert slow.returncode == 124 and "ran out of its 1 s" in slow.stderr, slow.stderr
        assert not processes("sleep 61")
        # A terminal cannot be had there yet: one sentence, not an internal error.
        with ada.session("net", name, "b") as ws:
            ws.send(json.dumps({"tty": True}))
            refused = json.loads(ws.recv(timeout=60))
        assert "where a command cannot have a terminal yet" in refused["error"], refused
        assert refused["status"] != 500, refused
    finally:
        if ada is not None:
            ada.request("POST", f"{NET}/{name}/swapout")
            wait_for(ada, f"{NET}/{name}", "swapout")
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    for host in machines.hosts:
        assert not (machines.work_dir(host) / f"net--{name}").exists()
        assert not (machines.run_dir(host) / f"net--{name}").exists()
