"""Simulated machines for the cluster tests: each host is a network namespace with its own
address on an underlay bridge in the root namespace, and its share of an experiment is built
by a process running inside that namespace (its network namespace only: node namespaces it
makes must be visible to everyone, as on a real host, so its mount namespace stays the
machine's). Every name carries ``i21`` and this process's id, so nothing collides with other
experiments or test runs on the machine, and ``stop`` removes exactly what ``start`` made.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"
SUBNET = "10.221.0"  # the underlay's /24
GATEWAY = f"{SUBNET}.254"  # the root namespace's address on the underlay bridge
# Two hosts on each side of a bottleneck; two nodes a host put each side on its own host.
DUMBBELL = """
routing: static
nodes: [{name: h1}, {name: r1}, {name: r2}, {name: h3}]
links:
  - {name: access1, members: [h1, r1]}
  - {name: bottleneck, members: [r1, r2], bandwidth: 10Mb, delay: 20ms}
  - {name: access3, members: [r2, h3]}
"""


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


class Machines:
    """``count`` simulated hosts called h1, h2, …"""

    def __init__(self, count: int):
        self.id = f"{os.getpid() % 100000}"
        self.bridge = f"i21u{self.id}"
        self.hosts = [f"h{i}" for i in range(1, count + 1)]
        self.namespaces = {h: f"i21-{self.id}-{h}" for h in self.hosts}
        self.addresses = {h: f"{SUBNET}.{i}" for i, h in enumerate(self.hosts, 1)}
        self.uplinks = {h: f"i21u{self.id}{h}" for h in self.hosts}

    def start(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for host, namespace in self.namespaces.items():
            _run("ip", "netns", "add", namespace)
            _run("ip", "link", "add", self.uplinks[host], "type", "veth",
                 "peer", "name", "up0", "netns", namespace)  # fmt: skip
            _run("ip", "link", "set", self.uplinks[host], "master", self.bridge, "up")
            _run("ip", "-n", namespace, "addr", "add", f"{self.addresses[host]}/24", "dev", "up0")
            _run("ip", "-n", namespace, "link", "set", "up0", "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")

    def stop(self) -> None:
        """Removes the hosts (their uplinks go with them), the bridge and the run folders."""
        for host, namespace in self.namespaces.items():
            # The uplink first: deleting a namespace frees its devices later, in the kernel's
            # own time; deleting one end of a veth pair removes both at once.
            subprocess.run(["ip", "link", "delete", self.uplinks[host]], capture_output=True)
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
            shutil.rmtree(self.run_dir(host), ignore_errors=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)

    def run_dir(self, host: str) -> Path:
        """The host's nestbed state folder (``NESTBED_RUN_DIR``): on a real host /run/nestbed."""
        return Path(f"/run/nestbed-i21-{self.id}-{host}")

    def env(self, host: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(SRC), "NESTBED_RUN_DIR": str(self.run_dir(host))}

    def argv(self, host: str, *argv: str) -> list[str]:
        """``argv`` run inside the host's network namespace."""
        return ["nsenter", f"--net=/run/netns/{self.namespaces[host]}", "--", *argv]

    def call(self, host: str, function: str, *args: Any) -> subprocess.CompletedProcess:
        """``nestbed.backend.cluster.host.FUNCTION(*args)`` in a process on the host."""
        with tempfile.NamedTemporaryFile(suffix=".pickle") as data:
            pickle.dump(args, data)
            data.flush()
            code = (
                "import pickle, sys\n"
                "from nestbed.backend.cluster import host\n"
                "args = pickle.load(open(sys.argv[2], 'rb'))\n"
                "getattr(host, sys.argv[1])(*args)\n"
            )
            argv = self.argv(host, sys.executable, "-c", code, function, data.name)
            return subprocess.run(argv, env=self.env(host), capture_output=True, text=True)

    def sockets(self, host: str) -> str:
        """The host's UDP sockets, as ``ss`` lists them."""
        argv = self.argv(host, "ss", "-Hnua")
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def interfaces() -> set[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True)
    return {line.split()[0].split("@")[0] for line in out.stdout.splitlines() if line.strip()}


def processes(needle: str) -> list[str]:
    """Command lines of the processes that name ``needle`` (linkd names its state folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, UnicodeDecodeError):
                continue
            if needle in cmd:
                found.append(cmd)
    return found
