"""The server's exec sessions reach a node on another host: a real `nestbed serve` whose back
end is the simulated cluster runs `nestbed exec --server` in a node there as the project's
identity, in the node's working folder on its host, with its input streamed to it through the
host's agent as it is written, and ended there at its timeout; and `nestbed shell --server`
there has a terminal on that host, typed in as a user would (``typed``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from simulated import processes
from typed import Typed, shell_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_helpers import LINE, Served, wait_for

pytestmark = pytest.mark.root

NET = "/v1/projects/net/experiments"


def test_exec_and_shell_sessions_reach_a_node_on_another_host_with_input_and_a_terminal(
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
        # A shell with a terminal there, as the project's identity in b's folder on its host.
        typed = Typed([sys.executable, "-m", "nestbed", "shell", name, "b"],
                      server.env(**env), cwd=root)  # fmt: skip
        try:
            typed.expect(b"$ ")  # the shell's prompt: not root's
            typed.type("echo ID=$(id -u) IN=$(pwd)\r")
            said = typed.expect(b"IN=/").decode(errors="replace")
            line = next(line for line in said.splitlines() if line.startswith("ID="))
            uid, pwd = (part.split("=", 1)[1] for part in line.split())
            assert int(uid) != 0 and Path(pwd).name == "b", line
            shell_session(typed, prompt=False)
        finally:
            typed.close()
    finally:
        if ada is not None:
            ada.request("POST", f"{NET}/{name}/swapout")
            wait_for(ada, f"{NET}/{name}", "swapout")
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    for host in machines.hosts:
        assert not (machines.work_dir(host) / f"net--{name}").exists()
        assert not (machines.run_dir(host) / f"net--{name}").exists()
