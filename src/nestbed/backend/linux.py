"""The Linux back end: carries out a swap-in plan with network namespaces, veth pairs, bridges
and nestbed-linkd, through netlink (``backend.netlink``) without a shell process per operation.

Everything lives inside namespaces named with the experiment's tag, so tearing an experiment
down is deleting its namespaces (their interfaces go with them) and stopping its linkd;
``cleanup`` finds leftovers of any experiment by that prefix and nothing else.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed import places
from nestbed.backend import entry, netlink, offloads, processes
from nestbed.backend.base import LOCAL_LEAD_S
from nestbed.backend.cgroups import CGROUP_PREFIX, Cgroups, Limits, NodeCgroup
from nestbed.backend.confine import confined_argv, hand_over, private_folder, work_folder
from nestbed.backend.linkd import LinkdClient
from nestbed.backend.plan import (
    MARK_PREFIX,
    NS_PREFIX,
    TAG_LENGTH,
    Plan,
    experiment_tag,
    mark,
)
from nestbed.backend.sockets import SocketClient, start_daemon, wait_listening
from nestbed.binaries import built_binary
from nestbed.errors import EnvironmentProblem, InternalError, NestbedError, UserError

if TYPE_CHECKING:
    from nestbed.model.options import RunAs

RUN_DIR = Path(places.run_root())
# nestbed-sim's pid file, named here (``sim`` takes it from here): a command that only reads
# an experiment (`nestbed status`) gets this back end without nestbed-sim's client.
SIM_PID = "sim.pid"
NETNS_ETC = Path("/etc/netns")
NETNS_RUN_DIR = Path("/run/netns")  # named network namespaces, as iproute2 keeps them
# Threads for the steps of a swap-out that mostly wait for the kernel (removing namespaces
# and cgroups): one of 100 nodes at load 17 took 1.45 s on one, 0.8 s on 4 to 16. (Creating
# namespaces side by side gained nothing: their mounts are serialized in the kernel.)
THREADS = 8
# Offloads that would hand the emulator frames larger than the wire's, or checksums the
# kernel never finished (bridging through AF_PACKET does not complete them).
OFFLOADS = (
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-accecn-segmentation",  # kernels since 6.18
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
    """Runs the block with this thread in ``namespace`` (for /proc/sys and ethtool ioctls);
    FileNotFoundError when it does not exist.

    The namespace is opened without creating it (checking an experiment that was half swapped
    in must not leave empty namespaces behind), and entered with setns(2).
    """
    handle = os.open(NETNS_RUN_DIR / namespace, os.O_RDONLY)
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(handle)
    except BaseException:
        os.close(saved)
        raise
    finally:
        os.close(handle)
    try:
        yield
    finally:
        try:
            _setns(saved)
        finally:
            os.close(saved)


def _setns(handle: int) -> None:
    if _libc.setns(handle, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "entering a network namespace failed")


def _listnetns() -> list[str]:
    try:
        return os.listdir(NETNS_RUN_DIR)
    except FileNotFoundError:
        return []


def _remove_namespace(name: str) -> None:
    """Unmounts and removes /run/netns/NAME, as `ip netns delete` does."""
    path = NETNS_RUN_DIR / name
    _libc.umount2(str(path).encode(), _MNT_DETACH)
    os.unlink(path)


_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000
_MS_BIND = 4096
_MS_REC = 16384
_MS_SHARED = 1 << 20
_MNT_DETACH = 2


def run_dir(plan: Plan) -> Path:
    return RUN_DIR / plan.experiment


# What a back end built on this one adds to a plan's namespaces once they are wired and before
# nestbed-linkd starts (the cluster's VXLAN devices); it sets ``step[0]`` to what it is doing.
Attach = Callable[[list[str]], None]


def swap_in(plan: Plan, attach: Attach | None = None) -> None:
    """Creates everything in ``plan`` (then ``attach``, before nestbed-linkd starts); on any
    failure removes what it made and re-raises."""
    require_root()
    if plan.simulation is not None:
        from nestbed.backend import sim

        sim.binary(plan)  # one sentence naming the extra, before anything is made
    taken = sorted(set(plan.namespaces) & set(_listnetns()))
    if taken:
        raise EnvironmentProblem(
            f"namespace {taken[0]} of experiment {plan.experiment} already exists; if no "
            "experiment of this name is active, remove leftovers with `nestbed cleanup`"
        )
    step = ["starting"]
    created: list[str] = []
    _claim(plan)
    try:
        _create(plan, step, created, attach)
        _unclaim(plan.tag)  # every namespace carries its mark now
    except BaseException as exc:
        # Remove only what this attempt made: a namespace of the same name that existed
        # before belongs to someone else.
        _remove(plan, created)
        _unclaim(plan.tag)
        if isinstance(exc, Exception) and not isinstance(exc, NestbedError):
            # A refusal names its request; anything else is placed by the stage.
            what = exc if isinstance(exc, netlink.Refused) else f"{step[0]}: {exc}"
            raise EnvironmentProblem(
                f"swap-in of experiment {plan.experiment} failed while {what}; "
                "everything it had created was removed"
            ) from exc
        raise


# A namespace is marked as nestbed's a moment after it is created; a swap-in killed in between
# would leave one that cleanup cannot tell from a stranger's. So swap-in first writes down the
# namespaces it is about to create (none of which exists: it refuses otherwise), and removes
# the note once all carry their mark. A namespace in a note is nestbed's, marked or not.
CLAIMS = RUN_DIR / ".claims"


def _claim(plan: Plan) -> None:
    # Root's alone: experiments' programs run as other users on a server, and the sockets,
    # pids and logs of every experiment are here.
    private_folder(RUN_DIR)
    CLAIMS.mkdir(parents=True, exist_ok=True, mode=0o700)
    note = CLAIMS / plan.tag
    note.write_text(json.dumps(list(plan.namespaces)))


def _claimed() -> dict[str, list[str]]:
    """The namespaces swap-ins set out to create and did not finish marking, by tag."""
    found = {}
    for note in sorted(CLAIMS.glob("*")) if CLAIMS.exists() else []:
        with contextlib.suppress(OSError, ValueError):
            found[note.name] = list(json.loads(note.read_text()))
    return found


def _unclaim(tag: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (CLAIMS / tag).unlink()


def _create(plan: Plan, step: list[str], created: list[str], attach: Attach | None) -> None:
    """Builds the plan; ``step[0]`` says what it is doing, ``created`` what it has made."""
    _raise_file_limit(len(plan.namespaces))
    sockets: dict[str, socket.socket] = {}
    try:
        _build(plan, step, sockets, created)
    finally:
        for sock in sockets.values():
            sock.close()
    if attach is not None:
        attach(step)
    step[0] = "creating the nodes' cgroups"
    cgroups = _create_cgroups(plan)
    # What `nestbed exec` needs to enter a node, without loading the plan (backend.entry).
    entry.write(run_dir(plan), {n.name: (n.netns, cgroups.get(n.name, [])) for n in plan.nodes})
    if plan.needs_linkd:
        step[0] = "starting nestbed-linkd"
        _start_linkd(plan)
    if plan.simulation is not None:
        step[0] = "starting nestbed-sim"
        _start_simulator(plan)


def _raise_file_limit(namespaces: int) -> None:
    """Swap-in holds a netlink socket and a namespace handle per namespace at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * namespaces + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def _prepare_run_netns() -> None:
    """/run/netns as `ip netns add` leaves it: a shared mount point (made one by binding it
    onto itself where it is a plain folder), so that removing a namespace's mount there
    removes it from every mount namespace that sees it."""
    NETNS_RUN_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    where = str(NETNS_RUN_DIR).encode()
    bound = False
    while _libc.mount(b"none", where, b"none", _MS_SHARED | _MS_REC, None) != 0:
        error = ctypes.get_errno()
        if error != errno.EINVAL or bound:
            raise OSError(error, f"making {NETNS_RUN_DIR} a shared mount failed")
        if _libc.mount(where, where, b"none", _MS_BIND | _MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), f"mounting {NETNS_RUN_DIR} on itself failed")
        bound = True


def _create_namespace(name: str, sysctls: tuple[str, dict[str, str]]) -> socket.socket:
    """A named network namespace with its sysctls set, and a netlink socket inside it.

    Made in a short-lived thread instead of a forked process: the thread unshares its network
    namespace, bind-mounts it at /run/netns/NAME as `ip netns add` does (the mount keeps it
    alive after the thread ends), writes the sysctls and opens the socket, which stays in the
    namespace.
    """
    path = NETNS_RUN_DIR / name
    made: list[socket.socket] = []
    failure: list[BaseException] = []
    named: list[bool] = []

    def work() -> None:
        try:
            if _libc.unshare(_CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"unshare for namespace {name} failed")
            os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
            named.append(True)
            source = b"/proc/thread-self/ns/net"
            if _libc.mount(source, str(path).encode(), b"none", _MS_BIND, None) != 0:
                raise OSError(ctypes.get_errno(), f"mounting namespace {name} failed")
            _write_sysctls(*sysctls)
            made.append(netlink.open_socket())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=work, name=f"netns-{name}")
    thread.start()
    thread.join()
    if failure:
        # Not yet handed to the swap-in (which removes what it created): a namespace whose
        # sysctls failed goes here, or the rollback would leave it.
        if named:
            with contextlib.suppress(OSError):
                _remove_namespace(name)
        raise failure[0]
    return made[0]


def _write_sysctls(who: str, sysctls: dict[str, str]) -> None:
    """Sets network sysctls of WHO in the calling thread's namespace (/proc/sys/net follows
    the thread)."""
    for key, value in sysctls.items():
        if not key.startswith("net.") or "/" in key or ".." in key.split("."):
            raise InternalError(f"sysctl {key!r} is not a network setting")
        try:
            Path("/proc/sys", *key.split(".")).write_text(value)
        except OSError as exc:
            what = f"setting sysctl {key}={value} on {who}: {exc.strerror}"
            raise netlink.Refused(exc.errno, what) from exc


class _Indexes:
    """Interface indexes chosen by nestbed, so that nothing is looked up after creation."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}
        self.of: dict[tuple[str, str], int] = {}

    def take(self, namespace: str, ifname: str) -> int:
        index = self.of[(namespace, ifname)] = self.next[namespace]
        self.next[namespace] += 1
        return index


def _build(
    plan: Plan, step: list[str], sockets: dict[str, socket.socket], created: list[str]
) -> None:
    """Namespaces first; then every veth pair; then addresses, marks, bridges and routes; each
    stage one batch of netlink requests per namespace."""
    indexes = _Indexes()
    batches: dict[str, netlink.Batch] = {}
    node_in = {node.netns: node for node in plan.nodes}
    _prepare_run_netns()
    for name in plan.namespaces:
        step[0] = f"creating namespace {name}"
        sockets[name] = _create_namespace(name, plan.sysctls(name))
        created.append(name)
        batch = batches[name] = netlink.Batch(sockets[name])
        indexes.next[name] = batch.max_index() + 1
        lo = netlink.LOOPBACK_INDEX
        netlink.add_altname(batch, lo, mark(plan.experiment), f"marking lo in {name}")
        netlink.set_up(batch, lo, f"bringing lo up in {name}")
    _flush(batches.values(), step, "marking and bringing up the loopbacks")

    handles = {}
    try:
        for veth in plan.veths:
            if veth.b.netns not in handles:
                handles[veth.b.netns] = os.open(NETNS_RUN_DIR / veth.b.netns, os.O_RDONLY)
            netlink.add_veth(
                batches[veth.a.netns],
                indexes.take(veth.a.netns, veth.a.ifname),
                veth.a.ifname,
                indexes.take(veth.b.netns, veth.b.ifname),
                veth.b.ifname,
                handles[veth.b.netns],
                f"creating the veth pair of {veth.link} ({veth.a.ifname} in {veth.a.netns})",
            )
        _flush(batches.values(), step, "creating the veth pairs")
    finally:
        for handle in handles.values():
            os.close(handle)

    for veth in plan.veths:
        for end in (veth.a, veth.b):
            batch, index = batches[end.netns], indexes.of[(end.netns, end.ifname)]
            where = f"{end.ifname} in {end.netns}"
            if end.address:
                netlink.add_address(batch, index, end.address, f"adding {end.address} to {where}")
            owner = node_in.get(end.netns)
            label = (owner.name, veth.link) if owner else (veth.link, end.ifname)
            netlink.add_altname(batch, index, mark(plan.experiment, *label), f"marking {where}")
            netlink.set_up(batch, index, f"bringing {where} up")
    for bridge in plan.bridges:
        batch = batches[bridge.netns]
        what = f"creating the bridge of LAN {bridge.link}"
        master = indexes.take(bridge.netns, bridge.ifname)
        netlink.add_bridge(batch, master, bridge.ifname, what)
        netlink.add_altname(batch, master, mark(plan.experiment, bridge.link), what)
        for port in bridge.ports:
            netlink.set_master(batch, indexes.of[(bridge.netns, port)], master, what)
    for node in plan.nodes:
        for route in node.routes:
            hop = f"via {route.via}" if route.via else f"on {route.dev}"
            what = f"adding route to {route.destination} {hop} on node {node.name}"
            oif = indexes.of[(node.netns, route.dev)] if route.dev else None
            netlink.add_route(batches[node.netns], route.destination, route.via, what, oif)
    _flush(batches.values(), step, "configuring addresses, bridges and routes")

    # Offloads are turned off from inside each namespace (ethtool ioctls), entered once.
    no_offloads: dict[str, list[str]] = {}
    for veth in plan.veths:
        for end in (veth.a, veth.b):
            if end.no_offloads:
                no_offloads.setdefault(end.netns, []).append(end.ifname)
    for namespace, ifnames in no_offloads.items():
        step[0] = f"turning offloads off in {namespace}"
        with inside(namespace):
            offloads.turn_off(ifnames, OFFLOADS)
    for node in plan.nodes:
        etc = NETNS_ETC / node.netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(node.hosts)


def _flush(batches: Iterable[netlink.Batch], step: list[str], stage: str) -> None:
    step[0] = stage
    for batch in batches:
        batch.flush()


_detected: list[Cgroups] = []  # the machine's cgroup hierarchies, found once per process


def _hierarchy(required: bool) -> Cgroups | None:
    """The cgroup hierarchies (None, or one sentence with ``required``, where there are none).

    Found once: reading the mount table again for every program a run starts took a
    millisecond of the controller's time at each start."""
    if not _detected:
        try:
            _detected.append(Cgroups.detect())
        except EnvironmentProblem:
            if required:
                raise
            return None
    return _detected[0]


def _create_cgroups(plan: Plan) -> dict[str, list[str]]:
    """A cgroup per node: its CPU and memory limits, and the controller's CPU accounting;
    each node's cgroup directories.

    Without a usable cgroup hierarchy nodes without limits still work (unaccounted).
    """
    hierarchy = _hierarchy(required=any(n.limited for n in plan.nodes))
    if hierarchy is None:
        return {}
    made = {}
    for node in plan.nodes:
        limits = Limits(node.cpu_cores, node.cpu_pin, node.memory_bytes)
        made[node.name] = [str(d) for d in hierarchy.create(plan.tag, node.name, limits).paths]
    return made


def _start_linkd(plan: Plan) -> None:
    directory = run_dir(plan)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock = directory / "linkd.sock"
    argv = [
        *("ip", "netns", "exec", plan.fabric, built_binary("nestbed-linkd")),
        *("--socket", str(sock)),
        *("--spin-us", os.environ.get("NESTBED_LINKD_SPIN_US", "200")),
    ]
    process = start_daemon(
        argv, sock, directory / "linkd.log", "nestbed-linkd", timeout_s=10, ping=False
    )
    # `ip netns exec` execs linkd in place, so this is linkd's own pid.
    (directory / "linkd.pid").write_text(f"{process.pid}\n")
    with SocketClient(sock) as client:
        # Each link is answered once registered; its ports' packet rings are set up meanwhile,
        # all at once (each waits for the kernel, ~25 ms, and concurrent ones share the wait):
        # `ready` returns once every link carries frames.
        for link in plan.emulated:
            client.request(**link.request(), wait=False)
        client.request("ready")


def _start_simulator(plan: Plan) -> None:
    """nestbed-sim in the fabric, reading each attachment's fabric end through a socket
    opened here (it keeps its copies; ours are closed once it has started)."""
    from nestbed.backend import sim

    assert plan.simulation is not None
    directory = run_dir(plan)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    sockets: dict[str, socket.socket] = {}
    try:
        with inside(plan.fabric):
            for attachment in plan.simulation.attachments:
                sockets[attachment.link] = sim.open_attachment(attachment.ifname)
        sim.start(plan, directory, sockets)
    finally:
        for sock in sockets.values():
            sock.close()


def linkd_socket(plan: Plan) -> Path:
    """The control socket of the experiment's nestbed-linkd."""
    return run_dir(plan) / "linkd.sock"


def linkd(plan: Plan, timeout_s: float | None = None) -> SocketClient:
    """A client of the experiment's running nestbed-linkd (each connect, send and answer
    given up after ``timeout_s``; None: waited for)."""
    return SocketClient(linkd_socket(plan), timeout=timeout_s)


def linkd_channel(plan: Plan) -> LinkdClient:
    """The experiment's running nestbed-linkd for the controller and the life cycle: any
    number of threads at once, and changes handed over ahead of their time."""
    return LinkdClient(linkd_socket(plan))


def _pid_in(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _stop_pid(pidfile: Path) -> None:
    """Stops the process named in a pid file: SIGTERM, then SIGKILL after two seconds; waits
    on its exit (a pidfd), not by polling."""
    pid = _pid_in(pidfile)
    if pid is not None:
        processes.stop(pid, grace_s=2.0)


def _stop_daemons(directory: Path) -> None:
    """The experiment's controller first (it still talks to linkd), then nestbed-sim and
    linkd."""
    for name in ("controller.pid", SIM_PID, "linkd.pid"):
        _stop_pid(directory / name)


def _kill_processes_in(namespaces: Iterable[str], spare: Iterable[int] = ()) -> None:
    """SIGKILLs every process whose network namespace is one of these (programs, traffic),
    but those of ``spare``."""
    inodes = set()
    for name in namespaces:
        with contextlib.suppress(OSError):
            inodes.add(os.stat(NETNS_RUN_DIR / name).st_ino)
    if not inodes:
        return
    victims = []
    for process in Path("/proc").iterdir():
        if process.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(process / "ns" / "net").st_ino in inodes:
                    victims.append(int(process.name))
    for pid in set(victims) - set(spare):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def swap_out(plan: Plan) -> None:
    """Removes everything ``plan`` creates; safe to run on a partial or absent swap-in.

    Only namespaces carrying nestbed's mark (or claimed by a swap-in that died before marking
    them) are removed: one of the same name made by someone else stays.
    """
    claimed = set(_claimed().get(plan.tag, ()))
    unclaimed = [n for n in plan.namespaces if n not in claimed]
    marked = dict(zip(unclaimed, _side_by_side([functools.partial(_marked, n)
                                                for n in unclaimed]), strict=True))  # fmt: skip
    _remove(plan, [n for n in plan.namespaces if n in claimed or marked[n]])
    _unclaim(plan.tag)


def _remove(plan: Plan, namespaces: Iterable[str]) -> None:
    directory = run_dir(plan)
    _stop_pid(directory / "controller.pid")  # first: it still talks to linkd
    # nestbed-sim and linkd have only their own files to finish after SIGTERM (linkd's loop
    # sees it within 100 ms, then joins its workers): told now, spared the SIGKILL of the
    # rest of the namespaces' processes, and waited for once the namespaces are gone.
    stopping = [pid for pid in map(_pid_in, (directory / SIM_PID, directory / "linkd.pid"))
                if pid is not None]  # fmt: skip
    for pid in stopping:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    namespaces = list(namespaces)
    _kill_processes_in(namespaces, spare=stopping)
    existing = set(_listnetns())
    # Unmounting a namespace and removing a cgroup each wait for the kernel (an RCU grace
    # period, a few ms) far more than they compute: done side by side, not one after another.
    removals = [functools.partial(_remove_node_namespace, n, n in existing) for n in namespaces]
    hierarchy = _hierarchy(required=False)
    if hierarchy is not None:
        removals.append(functools.partial(hierarchy.remove_nodes, plan.tag,
                                          [node.name for node in plan.nodes]))  # fmt: skip
    _side_by_side(removals)
    for pid in stopping:
        processes.stop(pid, grace_s=2.0)
    shutil.rmtree(directory, ignore_errors=True)


def _remove_node_namespace(name: str, mounted: bool) -> None:
    if mounted:
        _remove_namespace(name)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def _side_by_side(calls: list[Callable[[], Any]]) -> list[Any]:
    """The calls' results, the calls run on a few threads (each thread enters namespaces on
    its own); the first error is raised once all have run."""
    if len(calls) <= 1:
        return [call() for call in calls]
    # Plain threads taking the calls in turn: concurrent.futures (with logging, which it
    # imports) cost a swap-out some 6 ms of imports for no more than this.
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)
    left = list(enumerate(calls))
    taking = threading.Lock()

    def work() -> None:
        while True:
            with taking:
                if not left:
                    return
                i, call = left.pop(0)
            try:
                results[i] = call()
            except BaseException as exc:  # raised once all have run, as futures' would be
                errors[i] = exc

    threads = [threading.Thread(target=work) for _ in range(min(THREADS, len(calls)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results


def _marked(namespace: str) -> bool:
    """Whether a namespace's loopback carries nestbed's mark (see plan.mark)."""
    try:
        with inside(namespace):
            sock = netlink.open_socket()
        with sock:
            names = netlink.altnames(sock, netlink.LOOPBACK_INDEX)
    except OSError:
        return False
    return any(n.startswith(MARK_PREFIX) for n in names)


def leftovers() -> list[str]:
    """Namespaces nestbed made that still exist (any experiment): named nb-* and marked, or
    claimed by a swap-in that died before marking them."""
    claimed = {n for names in _claimed().values() for n in names}
    return sorted(
        n for n in _listnetns() if n.startswith(NS_PREFIX) and (n in claimed or _marked(n))
    )


def traces() -> list[str]:
    """Everything of any experiment that exists now: namespaces, cgroups, controller and
    linkd state directories (what a test compares before and after)."""
    hierarchy = _hierarchy(required=False)
    found = leftovers() + [f"cgroup {c}" for c in (hierarchy.leftovers() if hierarchy else [])]
    if RUN_DIR.exists():
        found += [f"run directory {d}" for d in _run_dirs()]
    return found


def _run_dirs() -> list[Path]:
    """Experiments' state folders (the hidden ones are the life cycle's, not an experiment's)."""
    if not RUN_DIR.exists():
        return []
    return sorted(d for d in RUN_DIR.iterdir() if d.is_dir() and not d.name.startswith("."))


def _tag_of_namespace(name: str) -> str:
    return name[len(NS_PREFIX) : len(NS_PREFIX) + TAG_LENGTH]


def leftovers_by_tag() -> dict[str, list[str]]:
    """What experiments have on this machine now, by tag: namespaces, cgroups, state folders."""
    found: dict[str, list[str]] = {}
    for name in leftovers():
        found.setdefault(_tag_of_namespace(name), []).append(f"namespace {name}")
    hierarchy = _hierarchy(required=False)
    for name in hierarchy.leftovers() if hierarchy else []:
        tag = name[len(CGROUP_PREFIX) : len(CGROUP_PREFIX) + TAG_LENGTH]
        found.setdefault(tag, []).append(f"cgroup {name}")
    for directory in _run_dirs():
        found.setdefault(experiment_tag(directory.name), []).append(f"run directory {directory}")
    return found


def remove_leftovers(tags: set[str]) -> list[str]:
    """Removes every namespace, daemon, cgroup and state folder of the experiments with
    these tags, and nothing of any other."""
    removed = []
    for directory in _run_dirs():
        if experiment_tag(directory.name) in tags:
            _stop_daemons(directory)
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(f"run directory {directory}")
    namespaces = [n for n in leftovers() if _tag_of_namespace(n) in tags]
    _kill_processes_in(namespaces)
    hierarchy = _hierarchy(required=False)
    for tag in sorted(tags):
        if hierarchy is not None:
            removed += [f"cgroup {c}" for c in hierarchy.remove(tag)]
    for name in namespaces:
        _remove_namespace(name)
        shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
        removed.append(f"namespace {name}")
    for tag in tags:
        _unclaim(tag)
    return removed


def node_cgroup(plan: Plan, node: str) -> NodeCgroup | None:
    """The node's cgroup; None where it has none (no usable hierarchy, or not swapped in)."""
    hierarchy = _hierarchy(required=False)
    if hierarchy is None:
        return None
    try:
        return hierarchy.open(plan.tag, node)
    except UserError:
        return None


def entering(plan: Plan, node: str) -> list[str]:
    """The argv that, followed by a command, runs it in the node's namespace and cgroup,
    both from its first instruction on (as `nestbed exec` enters it: ``backend.entry``)."""
    cgroup = node_cgroup(plan, node)
    return entry.argv(plan.node(node).netns, [str(d) for d in cgroup.paths] if cgroup else [], [])


def _in_node(plan: Plan, node: str, argv: list[str]) -> list[str]:
    """argv in the node's namespace and cgroup (``entering``)."""
    return [*entering(plan, node), *argv]


def open_socket(plan: Plan, node: str, kind: socket.SocketKind) -> socket.socket:
    """An IPv4 socket of ``kind`` in the node's network namespace."""
    with inside(plan.node(node).netns):
        return socket.socket(socket.AF_INET, kind)


def capture_argv(ifname: str, path: Path) -> list[str]:
    """tcpdump writing every whole frame on IFNAME to PATH as it arrives.

    Immediate mode: otherwise libpcap hands packets over in blocks retired once a second, and
    the block still open when tcpdump is stopped is lost, the last second of every capture.
    """
    return ["tcpdump", "-i", ifname, "-w", str(path), "-U", "-s", "0", "-q", "--immediate-mode"]


def exec_in(plan: Plan, node: str, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """Runs a command in a node (with its /etc/hosts), keeping argv, status and output."""
    return subprocess.run(_in_node(plan, node, argv), **kwargs)


def start_in(plan: Plan, node: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """Starts a command in a node without waiting for it."""
    return subprocess.Popen(_in_node(plan, node, argv), **kwargs)


class LinuxBackend:
    """This machine: network namespaces, veth pairs, bridges, cgroups and nestbed-linkd."""

    name = "linux"
    link_lead_s = LOCAL_LEAD_S  # linkd applies a link event at its time itself
    state_root = RUN_DIR
    work_elsewhere = False  # programs write in the results' own working folders

    def require_ready(self) -> None:
        require_root()

    run_dir = staticmethod(run_dir)
    swap_in = staticmethod(swap_in)
    swap_out = staticmethod(swap_out)
    start_in = staticmethod(start_in)
    entering = staticmethod(entering)
    exec_in = staticmethod(exec_in)
    confine = staticmethod(confined_argv)
    hand_over = staticmethod(hand_over)
    work_folder = staticmethod(work_folder)
    capture_argv = staticmethod(capture_argv)
    open_socket = staticmethod(open_socket)
    linkd = staticmethod(linkd_channel)
    node_cgroup = staticmethod(node_cgroup)
    wait_listening = staticmethod(wait_listening)
    leftovers = staticmethod(leftovers_by_tag)
    remove_leftovers = staticmethod(remove_leftovers)
    traces = staticmethod(traces)

    @staticmethod
    def placement_facts(plan: Plan) -> dict[str, Any]:
        return {}  # one machine: the manifest's host facts say it all

    @staticmethod
    def simulator(plan: Plan) -> Any:
        from nestbed.backend.sim import LocalSimulator  # sim imports this module

        return LocalSimulator(run_dir(plan))

    @staticmethod
    def bring_back(plan: Plan, folders: dict[str, Path], run_as: RunAs | None) -> list[str]:
        return []  # the programs wrote in the folders themselves
