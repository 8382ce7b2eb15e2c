"""Simulated machines for the cluster tests: each host is a network namespace with its own
address on an underlay, and its share of an experiment is built by a process running inside
that namespace (its network namespace only: node namespaces it makes must be visible to
everyone, as on a real host, so its mount namespace stays the machine's).

The underlay is a switch namespace where nestbed-linkd joins every host's uplink, and the root
namespace's (where the tests' Dask scheduler listens), as one LAN with a delay and a rate: so
crossing from host to host costs something real, as a network between machines does. Its MTU
is 9000 by default (jumbo frames, as testbeds' experiment networks often have), so that a cut
link carries 1500-byte packets as a link on one host does; ``mtu=1500`` makes a plain one.
``switch=True`` makes the underlay a kernel bridge instead, with no delay of its own, as a
machine room's switch (the benches compare the two). The underlay's nestbed-linkd runs in the
real-time class where the machine allows it, as a switch's forwarding is not delayed by the
hosts' work. Every
name carries ``i21`` and this process's id, so nothing collides with other experiments or test
runs on the machine, and ``stop`` removes exactly what ``start`` made.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nestbed.backend import linux, offloads
from nestbed.backend.processes import stop as stop_process
from nestbed.backend.sockets import SocketClient, start_daemon
from nestbed.binaries import built_binary
from nestbed.lifecycle import signals

SRC = Path(__file__).resolve().parents[2] / "src"
UNDERLAY_DELAY_S = 0.0005  # from host to host, each way (the sending port's egress pipe)
UNDERLAY_RATE_BPS = 1_000_000_000
UNDERLAY_MTU = 9000
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


def _realtime_allowed() -> bool:
    """Whether this machine lets a process into the real-time class (a container without
    CAP_SYS_NICE, or with no real-time budget for its cgroup, does not)."""
    try:
        done = subprocess.run(["chrt", "--fifo", "1", "true"], capture_output=True)
    except OSError:  # no chrt (util-linux) here
        return False
    return done.returncode == 0


SUBNETS = 250  # the /24s of 10.221.0.0/16 simulated clusters take (.254 is the gateway)


class _Subnet:
    """A /24 of 10.221.0.0/16 held by one simulated cluster while it lives: an exclusive
    lock on a file named after it, which a process that dies lets go of by itself."""

    def __init__(self, number: int, path: Path, fd: int):
        self.number, self.path, self.fd = number, path, fd

    @classmethod
    def claim(cls, first: int) -> _Subnet:
        """The first free one from ``first`` on (so that runs rarely ask for the same)."""
        for k in range(SUBNETS):
            number = (first + k) % SUBNETS
            path = Path(f"/run/lock/nestbed-i21-subnet-{number}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # Still the file at that name: its holder may have removed it between our
                # open and our lock, and another run made a new one there since.
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    return cls(number, path, fd)
            except (BlockingIOError, FileNotFoundError):
                pass
            os.close(fd)
        raise RuntimeError(f"all {SUBNETS} subnets of 10.221.0.0/16 are held by simulated hosts")

    def release(self) -> None:
        if self.fd < 0:
            return
        self.path.unlink(missing_ok=True)  # while still held, so no one takes it half-gone
        os.close(self.fd)
        self.fd = -1


_made = itertools.count()  # simulated clusters this process made


class Machines:
    """``count`` simulated hosts called h1, h2, …"""

    def __init__(
        self, count: int, mtu: int = UNDERLAY_MTU, *, switch: bool = False, realtime: bool = True
    ):
        self.mtu = mtu
        self.bridged = switch
        self.realtime = realtime  # the emulated underlay's linkd in the real-time class
        # A second cluster of the same process (a test's own, beside the session's) gets
        # names of its own: the same names would have each remove the other's hosts.
        made = next(_made)
        self.id = f"{os.getpid() % 100000}" + (f"n{made}" if made else "")
        self.gateway = f"i21g{self.id}"  # the root namespace's end of its uplink
        self.switch = f"i21-{self.id}-switch"
        self.hosts = [f"h{i}" for i in range(1, count + 1)]
        self.namespaces = {h: f"i21-{self.id}-{h}" for h in self.hosts}
        # A /24 of 10.221.0.0/16 of this run's own: the root namespace routes it to this run.
        # Claimed, not derived from the pid alone: two runs whose pids agreed modulo 250
        # shared one, and each took the other's agents for its own.
        self._subnet = _Subnet.claim(os.getpid() % SUBNETS)
        subnet = f"10.221.{self._subnet.number}"
        self.addresses = {h: f"{subnet}.{i}" for i, h in enumerate(self.hosts, 1)}
        self.gateway_address = f"{subnet}.254"  # the root namespace's address on the underlay
        self.linkd: subprocess.Popen | None = None

    def start(self) -> None:
        _run("ip", "netns", "add", self.switch)
        mtu = ("mtu", str(self.mtu))  # on both ends, before linkd sizes its rings by it
        _run("ip", "link", "add", self.gateway, *mtu, "type", "veth",
             "peer", "name", "gw", "netns", self.switch, *mtu)  # fmt: skip
        _run("ip", "addr", "add", f"{self.gateway_address}/24", "dev", self.gateway)
        _run("ip", "link", "set", self.gateway, "up")
        for host, namespace in self.namespaces.items():
            _run("ip", "netns", "add", namespace)
            _run("ip", "link", "add", "up0", "netns", namespace, *mtu, "type", "veth",
                 "peer", "name", host, "netns", self.switch, *mtu)  # fmt: skip
            _run("ip", "-n", namespace, "addr", "add", f"{self.addresses[host]}/24", "dev", "up0")
            _run("ip", "-n", namespace, "link", "set", "up0", "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
            _run("ip", "-n", self.switch, "link", "set", host, "up")
            with linux.inside(namespace):
                offloads.turn_off(["up0"], linux.OFFLOADS)
        _run("ip", "-n", self.switch, "link", "set", "gw", "up")
        with linux.inside(self.switch):
            offloads.turn_off(["gw", *self.hosts], linux.OFFLOADS)
        offloads.turn_off([self.gateway], linux.OFFLOADS)  # this process is in the root's
        if self.bridged:
            self._start_bridge()
        else:
            self._start_linkd()

    def _start_bridge(self) -> None:
        _run("ip", "-n", self.switch, "link", "add", "br0", "mtu", str(self.mtu), "type",
             "bridge", "forward_delay", "0")  # fmt: skip
        for port in [*self.hosts, "gw"]:
            _run("ip", "-n", self.switch, "link", "set", port, "master", "br0")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")

    def _start_linkd(self) -> None:
        directory = self.run_dir("switch")
        directory.mkdir(parents=True, exist_ok=True)
        sock = directory / "linkd.sock"
        argv = ["ip", "netns", "exec", self.switch, built_binary("nestbed-linkd"),
                "--socket", str(sock)]  # fmt: skip
        if self.realtime and _realtime_allowed():
            # The underlay stands for a switch, whose forwarding has hardware of its own: in
            # the real-time class, its emulator is not queued behind the hosts' link
            # emulators and probes on this machine's cores (36-207 µs late in the normal
            # class, in half the benches' delay rows; 18-25 µs here).
            argv = ["chrt", "--fifo", "1", *argv]
        self.linkd = start_daemon(argv, sock, directory / "linkd.log", "the underlay's linkd",
                                  timeout_s=10, ping=False)  # fmt: skip
        egress = {
            "delay": {"delay_ns": round(UNDERLAY_DELAY_S * 1e9)},
            "bandwidth": {"rate_bps": UNDERLAY_RATE_BPS},
        }
        ports = [{"port": p, "ifname": p, "egress": egress} for p in [*self.hosts, "gw"]]
        with SocketClient(sock) as client:
            client.request("add_link", link="underlay", lan=True, ports=ports)

    def stop(self) -> None:
        """Removes the underlay's linkd, the hosts and the switch (their interfaces go with
        them), the root namespace's uplink and the run folders; all of them even if one
        step fails."""
        try:
            if self.linkd is not None:
                stop_process(self.linkd.pid)
        finally:
            # The root's uplink first: deleting a namespace frees its devices later, in the
            # kernel's own time; deleting one end of a veth pair removes both at once.
            subprocess.run(["ip", "link", "delete", self.gateway], capture_output=True)
            for namespace in [*self.namespaces.values(), self.switch]:
                subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
            for directory in self.run_dir("x").parent.glob(self.run_dir("*").name):
                shutil.rmtree(directory, ignore_errors=True)
            self._subnet.release()

    def run_dir(self, host: str) -> Path:
        """The host's nestbed state folder (``NESTBED_RUN_DIR``): on a real host /run/nestbed
        (and the switch's, and the controlling machine's)."""
        return Path(f"/run/nestbed-i21-{self.id}-{host}")

    def work_dir(self, host: str) -> Path:
        """The host's folder of confined programs' working folders (``NESTBED_WORK_DIR``):
        on a real host /var/lib/nestbed/work. Beside its state folder, so ``stop`` removes it."""
        return Path(f"{self.run_dir(host)}-work")

    def env(self, host: str) -> dict[str, str]:
        """The environment of the host's processes: its state folder, and Dask's scratch
        space in it, hidden from what nestbed takes for experiments' folders (so a killed
        agent's stays there, removed by ``stop``), and its confined programs' folders."""
        run_dir = self.run_dir(host)
        return {**os.environ, "PYTHONPATH": str(SRC), "NESTBED_RUN_DIR": str(run_dir),
                "DASK_TEMPORARY_DIRECTORY": str(run_dir / ".dask"),
                "NESTBED_WORK_DIR": str(self.work_dir(host))}  # fmt: skip

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


class Agents:
    """The scheduler on the underlay and one `nestbed agent` inside each simulated host.
    Their logs are kept in ``folder`` while they run; at ``stop``, what they said about a
    lost connection is printed (a test's or the bench's output says why an agent left)."""

    def __init__(self, machines: Machines, *, slots: int, options: tuple[str, ...] = ()):
        self.machines, self.slots, self.options = machines, slots, options
        self.folder = Path(tempfile.mkdtemp(prefix="nb-scheduler-"))
        self.agents: dict[str, subprocess.Popen] = {}
        # A port the kernel picks, read back from the scheduler's file: a port derived from
        # the pid may be taken (another run's scheduler, or any program).
        self.scheduler, self.address = self._scheduler("0")

    def _scheduler(self, port: str) -> tuple[subprocess.Popen, str]:
        """A scheduler on the underlay's gateway at ``port`` (0: any), once it listens."""
        from nbtest import until

        address_file = self.folder / "scheduler.json"
        address_file.unlink(missing_ok=True)
        # A stop (Ctrl-C, SIGTERM, SIGHUP) is held while the process starts: one that came
        # inside Popen, after the child was made, would leave it running and unknown.
        with self._log("scheduler") as log, signals.deferred():
            scheduler = subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                 self.machines.gateway_address, "--port", port, "--no-dashboard",
                 "--scheduler-file", str(address_file)],
                stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        try:
            until(lambda: address_file.exists() or scheduler.poll() is not None,
                  "the scheduler to listen")  # fmt: skip
            assert scheduler.poll() is None, "the Dask scheduler exited at start"
            return scheduler, _scheduler_address(address_file)
        except BaseException:
            scheduler.kill()
            scheduler.wait()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def restart_scheduler(self) -> None:
        """The scheduler stopped and a new one started at the same address: every agent's
        connection to it breaks."""
        self.scheduler.terminate()
        self.scheduler.wait(timeout=30)
        self.scheduler, address = self._scheduler(self.address.rsplit(":", 1)[1])
        assert address == self.address, (address, self.address)

    def start(self, host: str, env: dict[str, str] | None = None) -> None:
        """The host's agent, its environment the host's with ``env`` over it (a test's
        broken host: where its Rust programs are, ``NESTBED_LINKD``)."""
        argv = [sys.executable, "-m", "nestbed", "agent", "--scheduler", self.address,
                "--host", host, "--slots", str(self.slots), *self.options]  # fmt: skip
        with self._log(f"agent-{host}") as log, signals.deferred():  # as for the scheduler
            self.agents[host] = subprocess.Popen(
                self.machines.argv(host, *argv), env={**self.machines.env(host), **(env or {})},
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def _log(self, name: str) -> Any:
        """A log file of this run's, appended to (a restarted process adds to its own)."""
        return open(self.folder / f"{name}.log", "ab")

    def kill(self, host: str) -> None:
        """As a crash would: SIGKILL, no goodbye to the scheduler."""
        self.agents[host].kill()
        self.agents.pop(host).wait()

    def lost(self) -> list[str]:
        """What the agents and the scheduler logged about a connection lost or a worker
        removed, oldest first in each log (before ``stop``: the stop itself breaks them)."""
        said = []
        for log in sorted(self.folder.glob("*.log")):
            with contextlib.suppress(OSError):
                said += [f"{log.stem}: {line}" for line in log.read_text().splitlines()
                         if any(word in line for word in _LOST)]  # fmt: skip
        return said

    def stop(self) -> None:
        for line in self.lost():
            print(line, file=sys.stderr)
        for process in [*self.agents.values(), self.scheduler]:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


# What Dask and the agent log when a worker's connection to its scheduler ends
_LOST = ("Stopping worker", "lost its scheduler", "failed to heartbeat", "Remove worker",
         "Failed to communicate", "unaware of this worker", "ERROR")  # fmt: skip


def _scheduler_address(path: Path) -> str:
    """The address in a scheduler file, once it is whole (it is written, not renamed)."""
    import json

    from nbtest import until

    found: list[str] = []

    def read() -> bool:
        with contextlib.suppress(ValueError, OSError):
            found.append(json.loads(path.read_text())["address"])
        return bool(found)

    until(read, "the scheduler file to be whole")
    return found[0]


@contextlib.contextmanager
def started(
    count: int,
    slots: int,
    options: tuple[str, ...] = (),
    mtu: int = UNDERLAY_MTU,
    *,
    switch: bool = False,
    realtime: bool = True,
) -> Iterator[tuple[Machines, Agents]]:
    """``count`` simulated hosts, each with an agent holding at most ``slots`` nodes (and
    its other ``options``), joined to a scheduler on an underlay of MTU ``mtu`` (a kernel
    bridge if ``switch``); all stopped and removed at the end, however it ends (a second
    signal waits until all is removed)."""
    from nbtest import until
    from nestbed.backend.cluster.backend import ClusterBackend

    machines = Machines(count, mtu, switch=switch, realtime=realtime)
    agents = None
    try:
        machines.start()
        agents = Agents(machines, slots=slots, options=options)
        for host in machines.hosts:
            agents.start(host)
        with ClusterBackend(agents.address) as probe:
            until(lambda: probe.hosts() == machines.hosts, "the agents to join")
        yield machines, agents
    finally:
        with signals.deferred():
            try:
                if agents is not None:
                    agents.stop()
            finally:
                machines.stop()
    assert not set(machines.namespaces.values()) & namespaces()


def unbuilt_checkout(folder: Path) -> dict[str, str]:
    """An agent's environment whose nestbed is a checkout without its Rust programs built
    (a copy of ``src`` in ``folder``, no ``target`` beside it), none on its PATH either: a
    fresh clone's."""
    shutil.copytree(SRC, folder / "src", ignore=shutil.ignore_patterns("__pycache__"))
    path = [d for d in os.environ.get("PATH", "").split(":")
            if d and not (Path(d) / "nestbed-linkd").exists()]  # fmt: skip
    return {"PYTHONPATH": str(folder / "src"), "PATH": ":".join(path), "NESTBED_LINKD": ""}


def namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def interfaces() -> set[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True)
    return {line.split()[0].split("@")[0] for line in out.stdout.splitlines() if line.strip()}


def processes(needle: str, where: str = "cmdline") -> list[str]:
    """Command lines of the processes that name ``needle`` in their command line (linkd names
    its state folder) or, with ``where="environ"``, in their environment (an agent has its
    host's state folder there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                text = cmd if where == "cmdline" else (entry / where).read_bytes().decode()
            except (OSError, UnicodeDecodeError):
                continue
            if needle in text:
                found.append(cmd)
    return found
