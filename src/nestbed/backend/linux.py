"""The Linux back end: carries out a swap-in plan with network namespaces, veth pairs, bridges
and nestbed-linkd, through netlink (pyroute2) without a shell process per operation.

Everything lives inside namespaces named with the experiment's tag, so tearing an experiment
down is deleting its namespaces (their interfaces go with them) and stopping its linkd;
``cleanup`` finds leftovers of any experiment by that prefix and nothing else.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute, netns
from pyroute2.ethtool import Ethtool

from nestbed.backend.cgroups import Cgroups, Limits
from nestbed.backend.plan import MARK_PREFIX, NS_PREFIX, Plan, mark
from nestbed.errors import EnvironmentProblem, InternalError, NestbedError, UserError

# linkd busy-waits this long before a frame is due: waking from a timer on a shared VM takes
# longer than 50 µs, and the delay target is 50 µs (see docs/benchmarks.md).
RUN_DIR = Path(os.environ.get("NESTBED_RUN_DIR", "/run/nestbed"))
NETNS_ETC = Path("/etc/netns")
# Offloads that would hand the emulator frames larger than the wire's, or checksums the
# kernel never finished (bridging through AF_PACKET does not complete them).
_OFFLOADS = (
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-generic-segmentation",
    "tx-udp-segmentation",
    "rx-gro",
    "tx-checksum-ip-generic",
)


def require_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "creating network namespaces needs root; run nestbed with sudo or as root"
        )


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """Runs the block with this thread in ``namespace`` (for /proc/sys and ethtool ioctls)."""
    netns.pushns(namespace)
    try:
        yield
    finally:
        netns.popns()


def built_binary(name: str) -> str:
    """A nestbed Rust binary: $NESTBED_<NAME>, this checkout's release build, or the PATH."""
    env = "NESTBED_" + name.removeprefix("nestbed-").upper()
    here = Path(__file__).resolve().parents[3] / "target" / "release" / name
    found = os.environ.get(env) or (str(here) if here.exists() else None) or shutil.which(name)
    if not found:
        raise EnvironmentProblem(
            f"{name} is not built; run `make setup` (it runs cargo build --release)"
        )
    return found


class SocketClient:
    """JSON-lines client of a nestbed daemon's Unix socket (nestbed-linkd, the controller).

    A refusal the daemon marks ``"user": true`` is the user's mistake (UserError); any other
    is an internal one.
    """

    def __init__(self, path: Path, what: str = "nestbed-linkd", timeout: float | None = None):
        self.path, self.what = path, what
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("r", encoding="utf-8")

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self.sock.sendall((json.dumps({"op": op, **fields}) + "\n").encode())
        line = self.reader.readline()
        if not line:
            raise InternalError(f"{self.what} at {self.path} closed its control socket")
        reply = json.loads(line)
        if not reply.get("ok"):
            if reply.get("user"):
                raise UserError(str(reply.get("error")))
            raise InternalError(f"{self.what} refused {op}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def run_dir(plan: Plan) -> Path:
    return RUN_DIR / plan.experiment


def swap_in(plan: Plan) -> None:
    """Creates everything in ``plan``; on any failure removes what it made and re-raises."""
    require_root()
    taken = sorted(set(plan.namespaces) & set(netns.listnetns()))
    if taken:
        raise EnvironmentProblem(
            f"namespace {taken[0]} of experiment {plan.experiment} already exists; if no "
            "experiment of this name is active, remove leftovers with `nestbed cleanup`"
        )
    step = ["starting"]
    created: list[str] = []
    try:
        _create(plan, step, created)
    except BaseException as exc:
        # Remove only what this attempt made: a namespace of the same name that existed
        # before belongs to someone else.
        _remove(plan, created)
        if isinstance(exc, Exception) and not isinstance(exc, NestbedError):
            raise EnvironmentProblem(
                f"swap-in of experiment {plan.experiment} failed while {step[0]}: {exc}; "
                "everything it had created was removed"
            ) from exc
        raise


class _Netlink:
    """One netlink socket per namespace for the whole swap-in (opening one costs a setns)."""

    def __init__(self) -> None:
        self.sockets: dict[str, IPRoute] = {}

    def __getitem__(self, namespace: str) -> IPRoute:
        # A netlink socket belongs to the namespace it was opened in; opening it from
        # inside (setns) avoids the helper process pyroute2's NetNS forks for each one.
        if namespace not in self.sockets:
            with inside(namespace):
                self.sockets[namespace] = IPRoute()
        return self.sockets[namespace]

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close()


def _create(plan: Plan, step: list[str], created: list[str]) -> None:
    """Builds the plan; ``step[0]`` says what it is doing, ``created`` what it has made."""
    nl = _Netlink()
    try:
        _build(plan, step, nl, created)
    finally:
        nl.close()
    step[0] = "creating the nodes' cgroups"
    _create_cgroups(plan)
    if plan.needs_linkd:
        step[0] = "starting nestbed-linkd"
        _start_linkd(plan)


_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000
_MS_BIND = 4096


def _create_namespace(name: str) -> None:
    """A named network namespace, made in a short-lived thread instead of a forked process.

    The thread unshares its network namespace and bind-mounts it at /run/netns/NAME, as
    `ip netns add` does; the mount keeps the namespace alive after the thread ends.
    """
    path = Path(netns.NETNS_RUN_DIR) / name
    failure: list[BaseException] = []

    def work() -> None:
        try:
            if _libc.unshare(_CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"unshare for namespace {name} failed")
            os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
            source = b"/proc/thread-self/ns/net"
            if _libc.mount(source, str(path).encode(), b"none", _MS_BIND, None) != 0:
                raise OSError(ctypes.get_errno(), f"mounting namespace {name} failed")
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=work, name=f"netns-{name}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _build(plan: Plan, step: list[str], nl: _Netlink, created: list[str]) -> None:
    for i, name in enumerate(plan.namespaces):
        step[0] = f"creating namespace {name}"
        # pyroute2 prepares /run/netns (a shared mount, as iproute2 does) on first use.
        if i == 0:
            netns.create(name)
        else:
            _create_namespace(name)
        created.append(name)
        lo = nl[name].link_lookup(ifname="lo")[0]
        nl[name].link("property_add", index=lo, altname=mark(plan.experiment))
        nl[name].link("set", index=lo, state="up")
    for veth in plan.veths:
        step[0] = f"creating the veth pair of {veth.link} ({veth.a.ifname} in {veth.a.netns})"
        nl[veth.a.netns].link(
            "add",
            ifname=veth.a.ifname,
            kind="veth",
            peer={"ifname": veth.b.ifname, "net_ns_fd": veth.b.netns},
        )
    node_of = {n.netns: n.name for n in plan.nodes}
    for veth in plan.veths:
        for end in (veth.a, veth.b):
            step[0] = f"configuring {end.ifname} in {end.netns}"
            ipr = nl[end.netns]
            index = ipr.link_lookup(ifname=end.ifname)[0]
            if end.address:
                ip, prefix = end.address.split("/")
                ipr.addr("add", index=index, address=ip, prefixlen=int(prefix))
            owner = node_of.get(end.netns)
            label = (owner, veth.link) if owner else (veth.link, end.ifname)
            ipr.link("property_add", index=index, altname=mark(plan.experiment, *label))
            ipr.link("set", index=index, state="up")
    for bridge in plan.bridges:
        step[0] = f"creating the bridge of LAN {bridge.link}"
        ipr = nl[bridge.netns]
        ipr.link("add", ifname=bridge.ifname, kind="bridge", br_stp_state=0)
        master = ipr.link_lookup(ifname=bridge.ifname)[0]
        ipr.link("property_add", index=master, altname=mark(plan.experiment, bridge.link))
        for port in bridge.ports:
            ipr.link("set", index=ipr.link_lookup(ifname=port)[0], master=master)
        ipr.link("set", index=master, state="up")
    # Offloads and sysctls are set from inside each namespace, entered once.
    no_offloads: dict[str, list[str]] = {}
    for veth in plan.veths:
        for end in (veth.a, veth.b):
            if end.no_offloads:
                no_offloads.setdefault(end.netns, []).append(end.ifname)
    sysctls = {node.netns: node for node in plan.nodes}
    for namespace in plan.namespaces:
        with inside(namespace):
            for ifname in no_offloads.get(namespace, []):
                step[0] = f"turning offloads off on {ifname} in {namespace}"
                _offloads_off(ifname)
            node = sysctls.get(namespace)
            for key, value in (node.sysctls if node else {}).items():
                step[0] = f"setting sysctl {key}={value} on node {node.name}"  # type: ignore[union-attr]
                target = Path("/proc/sys", *key.split("."))
                if not key.startswith("net.") or "/" in key or ".." in key.split("."):
                    raise InternalError(f"sysctl {key!r} is not a network setting")
                target.write_text(value)
    for node in plan.nodes:
        ipr = nl[node.netns]
        for route in node.routes:
            step[0] = f"adding route to {route.destination} via {route.via} on node {node.name}"
            dst = "0.0.0.0/0" if route.destination == "default" else route.destination
            ipr.route("add", dst=dst, gateway=route.via)
        etc = NETNS_ETC / node.netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(node.hosts)


def _hierarchy(required: bool) -> Cgroups | None:
    try:
        return Cgroups.detect()
    except EnvironmentProblem:
        if required:
            raise
        return None


def _create_cgroups(plan: Plan) -> None:
    """A cgroup per node: its CPU and memory limits, and the controller's CPU accounting.

    Without a usable cgroup hierarchy nodes without limits still work (unaccounted).
    """
    hierarchy = _hierarchy(required=any(n.limited for n in plan.nodes))
    if hierarchy is None:
        return
    for node in plan.nodes:
        limits = Limits(node.cpu_cores, node.cpu_pin, node.memory_bytes)
        hierarchy.create(plan.tag, node.name, limits)


def _offloads_off(ifname: str) -> None:
    tool = Ethtool()
    try:
        features = tool.get_features(ifname)
        for name in _OFFLOADS:
            if name in features.features:
                features.features[name].enable = False
        tool.set_features(ifname, features)
    finally:
        tool.close()


def _start_linkd(plan: Plan) -> None:
    directory = run_dir(plan)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock = directory / "linkd.sock"
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    log = (directory / "linkd.log").open("ab")
    process = subprocess.Popen(
        [
            *("ip", "netns", "exec", plan.fabric, built_binary("nestbed-linkd")),
            *("--socket", str(sock), "--spin-us", os.environ.get("NESTBED_LINKD_SPIN_US", "200")),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    # `ip netns exec` execs linkd in place, so this is linkd's own pid.
    (directory / "linkd.pid").write_text(f"{process.pid}\n")
    deadline = time.monotonic() + 10
    while not sock.exists():
        if time.monotonic() > deadline:
            raise InternalError(f"nestbed-linkd did not start; see {directory / 'linkd.log'}")
        time.sleep(0.01)
    client = SocketClient(sock)
    try:
        for link in plan.emulated:
            client.request(**link.request())
    finally:
        client.close()


def linkd(plan: Plan) -> SocketClient:
    """A client of the experiment's running nestbed-linkd."""
    return SocketClient(run_dir(plan) / "linkd.sock")


def _stop_pid(pidfile: Path) -> None:
    """Stops the process named in a pid file: SIGTERM, then SIGKILL after two seconds."""
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        for _ in range(200):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return  # our own child, now reaped
            os.kill(pid, 0)
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)


def _stop_daemons(directory: Path) -> None:
    """The experiment's controller first (it still talks to linkd), then linkd."""
    for name in ("controller.pid", "linkd.pid"):
        _stop_pid(directory / name)


def _kill_processes_in(namespaces: Iterable[str]) -> None:
    """SIGKILLs every process whose network namespace is one of these (programs, traffic)."""
    inodes = set()
    for name in namespaces:
        with contextlib.suppress(OSError):
            inodes.add(os.stat(Path(netns.NETNS_RUN_DIR) / name).st_ino)
    if not inodes:
        return
    victims = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino in inodes:
                    victims.append(int(entry.name))
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def swap_out(plan: Plan) -> None:
    """Removes everything ``plan`` creates; safe to run on a partial or absent swap-in.

    Only namespaces carrying nestbed's mark are removed: one of the same name made by
    someone else stays.
    """
    _remove(plan, [n for n in plan.namespaces if _marked(n)])


def _remove(plan: Plan, namespaces: Iterable[str]) -> None:
    directory = run_dir(plan)
    _stop_daemons(directory)
    _kill_processes_in(namespaces)
    hierarchy = _hierarchy(required=False)
    if hierarchy is not None:
        hierarchy.remove(plan.tag)
    existing = set(netns.listnetns())
    for name in namespaces:
        if name in existing:
            netns.remove(name)
        shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)


def _marked(namespace: str) -> bool:
    """Whether a namespace's loopback carries nestbed's mark (see plan.mark)."""
    try:
        with inside(namespace), IPRoute() as ipr:
            lo = ipr.link("get", index=ipr.link_lookup(ifname="lo")[0])[0]
    except (OSError, IndexError):
        return False
    props = lo.get_attr("IFLA_PROP_LIST")
    names = props.get_attrs("IFLA_ALT_IFNAME") if props else []
    return any(n.startswith(MARK_PREFIX) for n in names)


def leftovers() -> list[str]:
    """Namespaces nestbed made that still exist (any experiment): named nb-* and marked."""
    return sorted(n for n in netns.listnetns() if n.startswith(NS_PREFIX) and _marked(n))


def traces() -> list[str]:
    """Everything of any experiment that exists now: namespaces, cgroups, controller and
    linkd state directories (what a test compares before and after)."""
    hierarchy = _hierarchy(required=False)
    found = leftovers() + [f"cgroup {c}" for c in (hierarchy.leftovers() if hierarchy else [])]
    if RUN_DIR.exists():
        found += [f"run directory {d}" for d in sorted(RUN_DIR.iterdir())]
    return found


def cleanup() -> list[str]:
    """Removes every namespace, linkd and /etc/netns entry of any nestbed experiment."""
    if RUN_DIR.exists():
        for directory in RUN_DIR.iterdir():
            _stop_daemons(directory)
            shutil.rmtree(directory, ignore_errors=True)
    removed = leftovers()
    _kill_processes_in(removed)
    hierarchy = _hierarchy(required=False)
    if hierarchy is not None:
        hierarchy.cleanup()
    for name in removed:
        netns.remove(name)
        shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    return removed


def _in_node(plan: Plan, node: str, argv: list[str]) -> list[str]:
    # `ip netns exec` also bind-mounts the node's /etc/hosts, then execs argv in place.
    return ["ip", "netns", "exec", plan.node(node).netns, *argv]


def exec_in(plan: Plan, node: str, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """Runs a command in a node (with its /etc/hosts), keeping argv, status and output."""
    return subprocess.run(_in_node(plan, node, argv), **kwargs)


def start_in(plan: Plan, node: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """Starts a command in a node without waiting for it."""
    return subprocess.Popen(_in_node(plan, node, argv), **kwargs)


def wait_listening(process: subprocess.Popen, port: int, proto: str, timeout: float = 5) -> None:
    """Waits until ``process`` (in whatever namespace) has a ``proto`` socket bound to ``port``.

    /proc/PID/net shows the sockets of the process's own network namespace.
    """
    table = Path(f"/proc/{process.pid}/net/{proto}")
    wanted = f":{port:04X} "
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise InternalError(f"{process.args[4]} exited with {process.returncode} at start")
        with contextlib.suppress(OSError):
            lines = table.read_text().splitlines()[1:]
            # local address is the second column; TCP must be in LISTEN (0A)
            if any(
                wanted in f"{cols[1]} " and (proto != "tcp" or cols[3] == "0A")
                for cols in (line.split() for line in lines)
            ):
                return
        time.sleep(0.002)
    raise InternalError(f"{process.args} did not open {proto} port {port} in {timeout} s")
