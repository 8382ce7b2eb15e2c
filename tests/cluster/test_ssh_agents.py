"""`nestbed ssh-agents`: a cluster started from the controlling machine over SSH, on simulated
hosts each running an SSH server (``sshserver``) in its namespace. Its agents serve a swap-in
across hosts, and stop with the command; a host it cannot use is named before anything
starts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from simulated import DUMBBELL, SRC, Machines, namespaces

from nbtest import until

pytestmark = pytest.mark.root

SERVER = Path(__file__).with_name("sshserver.py")
SSH_PORT = 2222


class SSHHosts:
    """An SSH server in each simulated host, with a host key of its own, accepting one
    client key; ``known_hosts`` lists every host's key, as the controlling machine's would."""

    def __init__(self, machines: Machines, folder: Path):
        import asyncssh

        self.machines, self.folder = machines, folder
        self.identity = folder / "id_ed25519"
        client = asyncssh.generate_private_key("ssh-ed25519")
        client.write_private_key(str(self.identity))
        (folder / "authorized_keys").write_bytes(client.export_public_key())
        self.known_hosts = folder / "known_hosts"
        lines = []
        for host in machines.hosts:
            key = asyncssh.generate_private_key("ssh-ed25519")
            key.write_private_key(str(folder / f"host-{host}"))
            public = key.export_public_key().decode().strip()
            lines.append(f"[{machines.addresses[host]}]:{SSH_PORT} {public}")
        self.known_hosts.write_text("\n".join(lines) + "\n")
        self.servers: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        for host in self.machines.hosts:
            argv = self.machines.argv(
                host, sys.executable, str(SERVER), self.machines.addresses[host], str(SSH_PORT),
                str(self.folder / f"host-{host}"), str(self.folder / "authorized_keys"),
            )  # fmt: skip
            server = subprocess.Popen(argv, env=self.machines.env(host), stdout=subprocess.PIPE,
                                      text=True)  # fmt: skip
            self.servers[host] = server
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        for server in self.servers.values():
            server.terminate()
        for server in self.servers.values():
            server.wait(timeout=30)


@contextlib.contextmanager
def ssh_hosts(count: int, folder: Path) -> Iterator[tuple[Machines, SSHHosts]]:
    """``count`` simulated hosts reachable over SSH; all removed at the end, however it ends."""
    machines = Machines(count)
    hosts = None
    try:
        machines.start()
        hosts = SSHHosts(machines, folder)
        hosts.start()
        yield machines, hosts
    finally:
        try:
            if hosts is not None:
                hosts.stop()
        finally:
            machines.stop()
    assert not set(machines.namespaces.values()) & namespaces()


def in_namespace(namespace: str) -> list[str]:
    """Command lines of the processes whose network namespace is ``namespace``."""
    inode = os.stat(f"/run/netns/{namespace}").st_ino
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino == inode:
                    found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    return found


def ssh_agents(machines: Machines, hosts: SSHHosts, *args: str) -> list[str]:
    """`nestbed ssh-agents` for every simulated host, with ``args``."""
    names = [f"{h}={machines.addresses[h]}" for h in machines.hosts]
    return [sys.executable, "-m", "nestbed", "ssh-agents", *names, "--port", str(SSH_PORT),
            "--identity", str(hosts.identity), "--known-hosts", str(hosts.known_hosts),
            "--listen", machines.gateway_address, "--scheduler-port", "0", *args]  # fmt: skip


def env(machines: Machines) -> dict[str, str]:
    environ = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200",
               "NESTBED_RUN_DIR": str(machines.run_dir("controller"))}  # fmt: skip
    for variable in ("NESTBED_BACKEND", "NESTBED_CLUSTER", "NESTBED_CONFIG"):
        environ.pop(variable, None)
    return environ


def test_agents_started_over_ssh_serve_a_swap_in_across_hosts_and_stop_with_the_command(
    tmp_path,
):
    from nestbed.backend.cluster.backend import ClusterBackend

    with ssh_hosts(3, tmp_path) as (machines, hosts):
        command = subprocess.Popen(ssh_agents(machines, hosts, "--slots", "2",
                                              "--linkd-pps", "measure"),
                                   env=env(machines), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
        said: list[str] = []
        assert command.stdout is not None
        reader = threading.Thread(target=lambda: said.extend(command.stdout), daemon=True)
        reader.start()
        try:
            until(lambda: any(line.startswith("scheduler tcp://") for line in said)
                  or command.poll() is not None, "the agents to start over SSH")  # fmt: skip
            assert command.poll() is None, command.stderr.read() if command.stderr else ""
            address = next(line for line in said if line.startswith("scheduler ")).split()[1]
            address = address.rstrip(",")
            # Each agent runs inside its host (its namespace), serving on its address there.
            with ClusterBackend(address) as cluster:
                facts = {f.name: f for f in cluster.facts()}
            assert sorted(facts) == machines.hosts
            for host in machines.hosts:
                assert facts[host].address == machines.addresses[host]
                assert facts[host].slots == 2
                # Its link emulator measured on the host, over SSH, before its agent started.
                assert facts[host].linkd_pps is not None and facts[host].linkd_pps > 0
                assert any("nestbed.backend.cluster.agent.SSHAgent" in c
                           for c in in_namespace(machines.namespaces[host]))  # fmt: skip
            # The cluster serves the life cycle as one whose agents were started by hand,
            # named by the user's configuration file rather than --cluster.
            name = f"i21ssh{os.getpid()}"
            path = tmp_path / f"{name}.yaml"
            path.write_text(DUMBBELL)
            (tmp_path / "config" / "nestbed").mkdir(parents=True)
            (tmp_path / "config" / "nestbed" / "config.yaml").write_text(f"cluster: {address}\n")
            user = {**env(machines), "XDG_CONFIG_HOME": str(tmp_path / "config")}
            cli = [sys.executable, "-m", "nestbed", "--db", str(tmp_path / "store.db")]
            try:
                done = subprocess.run([*cli, "swapin", str(path), "--results",
                                       str(tmp_path / "run")], env=user, text=True,
                                      capture_output=True, timeout=300)  # fmt: skip
                assert done.returncode == 0, done.stdout + done.stderr
                placed = json.loads((machines.run_dir("controller") / ".cluster" / name
                                     / "placement.json").read_text())["nodes"]  # fmt: skip
                assert placed["r1"] != placed["r2"]  # across hosts
                ping = subprocess.run([*cli, "exec", name, "h1", "--", "ping", "-n", "-c", "3",
                                       "-i", "0.2", "h3"], env=user,
                                      capture_output=True, text=True, timeout=120)  # fmt: skip
                assert ping.returncode == 0, ping.stdout + ping.stderr
                assert " 0% packet loss" in ping.stdout
            finally:
                subprocess.run([*cli, "swapout", name], env=user, capture_output=True,
                               timeout=300)  # fmt: skip
            command.send_signal(signal.SIGTERM)
            command.wait(timeout=60)
            reader.join(timeout=10)
        finally:
            if command.poll() is None:
                command.kill()
                command.wait()
        stderr = command.stderr.read() if command.stderr else ""
        assert command.returncode == 128 + signal.SIGTERM, stderr
        assert any(line.startswith("stopped the agents on h1, h2, h3") for line in said), said
        # Each agent ended on SIGTERM, not killed after it.
        for host in machines.hosts:
            assert f"[{host}] agent stopped\n" in stderr, stderr
            pps = facts[host].linkd_pps
            assert f"[{host}] its link emulator carries {pps} packets/s\n" in stderr, stderr
        # Stopping the command stopped every agent: nothing runs in a host but its SSH server.
        for host in machines.hosts:
            left = [c for c in in_namespace(machines.namespaces[host]) if str(SERVER) not in c]
            assert not left, (host, left)


def test_a_host_that_cannot_serve_is_named_and_nothing_starts_anywhere(tmp_path):
    with ssh_hosts(2, tmp_path) as (machines, hosts):
        unknown = tmp_path / "known_hosts_without_h2"
        unknown.write_text(hosts.known_hosts.read_text().splitlines()[0] + "\n")
        cases = [
            (("--known-hosts", str(unknown)),
             f"host h2 ({machines.addresses['h2']}, port {SSH_PORT}) has an SSH key that is not "
             f"in {unknown}; connect to it once with ssh, or give --known-hosts FILE with its key"),
            (("--remote-python", "/opt/nestbed/bin/python"),
             f"host h1 ({machines.addresses['h1']}, port {SSH_PORT}) has no nestbed for "
             "/opt/nestbed/bin/python (/bin/sh: 1: /opt/nestbed/bin/python: not found); "
             "install nestbed there or give --remote-python with the Python that has it"),
        ]  # fmt: skip
        for args, message in cases:
            done = subprocess.run(ssh_agents(machines, hosts, *args), env=env(machines),
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            assert done.returncode == 2, done.stderr
            assert done.stderr == f"error: {message}\n"
            for host in machines.hosts:
                left = [c for c in in_namespace(machines.namespaces[host]) if str(SERVER) not in c]
                assert not left, (host, left)
        # An agent that starts but cannot serve (its time service's port taken on h2) says
        # why, and the one already serving on h1 is stopped with it.
        hold = (
            "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.bind(('0.0.0.0', 14790))\nprint('held', flush=True)\ntime.sleep(600)\n"
        )
        holder = subprocess.Popen(machines.argv("h2", sys.executable, "-c", hold),
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            done = subprocess.run(ssh_agents(machines, hosts), env=env(machines),
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
        finally:
            holder.kill()
            holder.wait()
        assert done.returncode == 3, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert errors == ["error: the agent of host h2 cannot answer time requests on UDP port "
                          "14790 ([Errno 98] Address already in use); give another "
                          "--clock-port"], done.stderr  # fmt: skip
        # Dask waits for every agent's start before it says one failed: h1's had started.
        assert "[h1] agent stopped\n" in done.stderr, done.stderr
        for host in machines.hosts:
            left = [c for c in in_namespace(machines.namespaces[host]) if str(SERVER) not in c]
            assert not left, (host, left)
