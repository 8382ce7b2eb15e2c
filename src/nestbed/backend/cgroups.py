"""Per-node CPU and memory limits and usage accounting with cgroups (v2 unified or v1), in
directories ``nestbed/nb-<tag>-<node>`` that cleanup finds by name."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from nestbed.backend import entry
from nestbed.errors import EnvironmentProblem, InternalError, UserError

CGROUP_PREFIX = "nb-"
PARENT = "nestbed"
CPU_PERIOD_US = 100_000
KILL_WAIT_S = 5.0
V2_CONTROLLERS = ("cpu", "memory", "cpuset")
# A v1 hierarchy is usable when its controller's own file is there (not just an empty dir).
V1_MARKERS = {
    "cpu": "cpu.cfs_quota_us",
    "cpuacct": "cpuacct.usage",
    "memory": "memory.limit_in_bytes",
    "cpuset": "cpuset.cpus",
}
# The errnos with which the kernel refuses a value rather than the operation.
_REFUSED = (errno.EINVAL, errno.ERANGE, errno.EBUSY)


@dataclass(frozen=True)
class Limits:
    cpu_cores: float | None = None  # CPU quota in cores (CFS quota = cores * period)
    cpu_pin: tuple[int, ...] = ()  # cores to pin to (cpuset); empty = any
    memory_bytes: int | None = None  # hard memory limit


def _read(path: Path) -> str:
    return path.read_text().strip()


def _set(path: Path, value: str, what: str | None = None) -> None:
    """Writes one setting; ``what`` names the user's value, for when the kernel refuses it."""
    try:
        # open(..., "w") also works in a test tree, where no kernel made the interface file.
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        if what and exc.errno in _REFUSED:
            raise UserError(f"{what} was refused by the kernel ({exc.strerror})") from exc
        raise EnvironmentProblem(f"cannot write {value!r} to {path} ({exc.strerror})") from exc


def _mkdir(path: Path, exist_ok: bool = False) -> None:
    try:
        path.mkdir(exist_ok=exist_ok)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot create cgroup {path} ({exc.strerror}); CPU and memory limits need root"
        ) from exc


def _cpulist(cores: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> "0-2,5", the kernel's list format."""
    ranges: list[list[int]] = []
    for core in sorted(set(cores)):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


class NodeCgroup:
    """One node's cgroup (one directory per v1 hierarchy used, or one v2 directory)."""

    def __init__(self, name: str, version: int, dirs: dict[str, Path]):
        self.name = name
        self.version = version
        self.dirs = dirs  # controller -> its directory; on v2 all are the same one
        self.paths = list(dict.fromkeys(dirs.values()))

    def entered(self, argv: list[str]) -> list[str]:
        """argv as a command that first joins this cgroup, then execs argv in its place."""
        return entry.joined(self.paths, argv)

    def add(self, pid: int) -> None:
        for d in self.paths:
            _set(d / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.paths:
            with contextlib.suppress(FileNotFoundError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return sorted(found)

    @property
    def cpu_counter(self) -> Path:
        """The file counting the cgroup's CPU time: v1 ``cpuacct.usage`` (ns), v2 ``cpu.stat``."""
        if self.version == 1:
            return self.dirs["cpuacct"] / "cpuacct.usage"
        return self.dirs["cpu"] / "cpu.stat"

    def cpu_seconds(self) -> float:
        if self.version == 1:
            return int(_read(self.cpu_counter)) / 1e9
        for line in _read(self.cpu_counter).splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise InternalError(f"cpu.stat of cgroup {self.name} has no usage_usec")

    def memory_bytes(self) -> int:
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return int(_read(self.dirs["memory"] / name))

    def kill(self) -> None:
        """SIGKILLs every process in it and waits, at most KILL_WAIT_S, until it is empty."""
        kill_file = self.paths[0] / "cgroup.kill"
        atomic = self.version == 2 and kill_file.exists()
        if atomic:
            _set(kill_file, "1")
        deadline = time.monotonic() + KILL_WAIT_S
        while (pids := self.pids()) and time.monotonic() < deadline:
            if not atomic:
                # Every round, since a process may fork between reading the list and the kill.
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def _destroy(self) -> None:
        self.kill()
        deadline = time.monotonic() + KILL_WAIT_S
        for d in self.paths:
            while True:
                try:
                    os.rmdir(d)  # a cgroup goes with rmdir; its files cannot be deleted
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    # A cgroup stays busy for a moment after its last process exited.
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise EnvironmentProblem(
                            f"cannot remove cgroup {d} ({exc.strerror}); "
                            "stop the processes still in it and run `nestbed cleanup`"
                        ) from exc
                    time.sleep(0.02)


class Cgroups:
    """The cgroup hierarchy of this host: v2 unified or v1 controllers (any root, for tests)."""

    def __init__(self, root: Path, version: int, hierarchies: dict[str, Path]):
        self.root = root
        self.version = version
        self.hierarchies = hierarchies  # controller -> root of its hierarchy

    @classmethod
    def detect(cls, root: Path = Path("/sys/fs/cgroup")) -> Cgroups:
        controllers = root / "cgroup.controllers"
        if controllers.exists() and set(V2_CONTROLLERS) <= set(_read(controllers).split()):
            return cls(root, 2, dict.fromkeys(V2_CONTROLLERS, root))
        # Resolved, so that comounted hierarchies (cpu -> cpu,cpuacct) count as one directory.
        found = {c: (root / c).resolve() for c, f in V1_MARKERS.items() if (root / c / f).exists()}
        if {"cpu", "cpuacct", "memory"} <= found.keys():
            return cls(root, 1, found)
        raise EnvironmentProblem(
            f"no usable cgroups under {root}: nestbed needs cgroup v2 with the cpu, memory and "
            "cpuset controllers, or the cgroup v1 cpu, cpuacct and memory hierarchies"
        )

    def create(self, tag: str, node: str, limits: Limits) -> NodeCgroup:
        """Makes the node's cgroup with ``limits``; on failure removes what it made."""
        name = _name(tag, node)
        _check(node, limits)
        if limits.cpu_pin and "cpuset" not in self.hierarchies:
            raise EnvironmentProblem(
                f"node {node} is pinned to cores, but the cgroup v1 cpuset hierarchy is not mounted"
            )
        used = [c for c in self.hierarchies if c != "cpuset" or limits.cpu_pin]
        cg = NodeCgroup(name, self.version, {c: self.hierarchies[c] / PARENT / name for c in used})
        if any(d.exists() for d in cg.paths):
            raise EnvironmentProblem(
                f"cgroup {name} already exists; if its experiment is not active, "
                "remove leftovers with `nestbed cleanup`"
            )
        made: list[Path] = []
        try:
            for d in cg.paths:
                self._prepare_parent(d.parent)
                _mkdir(d)
                made.append(d)
            self._apply(cg, node, limits)
        except BaseException:
            for d in made:
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            raise
        return cg

    def open(self, tag: str, node: str) -> NodeCgroup:
        cg = self._existing(_name(tag, node))
        if not cg.paths:
            raise UserError(f"node {node} has no cgroup {cg.name}; is its experiment swapped in?")
        return cg

    def remove(self, tag: str) -> list[str]:
        return self._remove_all(_name(tag, ""))

    def remove_nodes(self, tag: str, nodes: list[str]) -> None:
        """Removes the cgroups of these nodes of the experiment, and no other's (a host of a
        cluster removes its own nodes'; on one machine simulating several hosts, the others'
        share the hierarchy)."""
        for node in nodes:
            cg = self._existing(_name(tag, node))
            if cg.paths:
                cg._destroy()
        self._drop_parents()

    def leftovers(self) -> list[str]:
        return self._names(CGROUP_PREFIX)

    def cleanup(self) -> list[str]:
        return self._remove_all(CGROUP_PREFIX)

    def _names(self, prefix: str) -> list[str]:
        names: set[str] = set()
        for hierarchy in set(self.hierarchies.values()):
            with contextlib.suppress(FileNotFoundError):
                for entry in (hierarchy / PARENT).iterdir():
                    if entry.name.startswith(prefix) and entry.is_dir():
                        names.add(entry.name)
        return sorted(names)

    def _existing(self, name: str) -> NodeCgroup:
        dirs = {c: h / PARENT / name for c, h in self.hierarchies.items()}
        return NodeCgroup(name, self.version, {c: d for c, d in dirs.items() if d.is_dir()})

    def _remove_all(self, prefix: str) -> list[str]:
        names = self._names(prefix)
        for name in names:
            cg = self._existing(name)
            if cg.paths:  # unless it went away meanwhile
                cg._destroy()
        self._drop_parents()
        return names

    def _drop_parents(self) -> None:
        """Removes nestbed's parent cgroups once no experiment has a cgroup under them, so a
        host with nothing swapped in keeps nothing of nestbed."""
        for hierarchy in set(self.hierarchies.values()):
            parent = hierarchy / PARENT
            try:
                if any(entry.is_dir() for entry in parent.iterdir()):
                    continue  # a cgroup of another experiment, or someone else's
                os.rmdir(parent)
            except OSError:  # gone already, or a swap-in is filling it right now
                continue

    def _prepare_parent(self, parent: Path) -> None:
        _mkdir(parent, exist_ok=True)
        if self.version == 2:
            # A child has a controller only if every ancestor enables it for its subtree.
            enable = " ".join(f"+{c}" for c in V2_CONTROLLERS)
            for d in (self.root, parent):
                _set(d / "cgroup.subtree_control", enable)
        elif parent.parent == self.hierarchies.get("cpuset"):
            # A v1 cpuset without cpus and mems takes no tasks: start from the whole host.
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (parent / f).exists() or not _read(parent / f):
                    _set(parent / f, _read(parent.parent / f))

    def _apply(self, cg: NodeCgroup, node: str, limits: Limits) -> None:
        v2 = self.version == 2
        if limits.cpu_cores is not None:
            what = f"the CPU limit of {limits.cpu_cores} cores for node {node}"
            quota, cpu = round(limits.cpu_cores * CPU_PERIOD_US), cg.dirs["cpu"]
            if v2:
                _set(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}", what)
            else:
                _set(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US), what)
                _set(cpu / "cpu.cfs_quota_us", str(quota), what)
        if limits.memory_bytes is not None:
            what = f"the memory limit of {limits.memory_bytes} bytes for node {node}"
            memory, value = cg.dirs["memory"], str(limits.memory_bytes)
            _set(memory / ("memory.max" if v2 else "memory.limit_in_bytes"), value, what)
            # Hard means no swapping past it either; the file is absent without swap accounting.
            swap = memory / ("memory.swap.max" if v2 else "memory.memsw.limit_in_bytes")
            if swap.exists():
                _set(swap, "0" if v2 else value, what)
        if limits.cpu_pin:
            cpuset = cg.dirs["cpuset"]
            if not v2:
                _set(cpuset / "cpuset.mems", _read(cpuset.parent / "cpuset.mems"))
            what = f"the pin of node {node} to cores {_cpulist(limits.cpu_pin)}"
            _set(cpuset / "cpuset.cpus", _cpulist(limits.cpu_pin), what)


def _name(tag: str, node: str) -> str:
    if not tag or "/" in tag + node:
        raise InternalError(f"bad cgroup name parts {tag!r} and {node!r}")
    return f"{CGROUP_PREFIX}{tag}-{node}"


def _check(node: str, limits: Limits) -> None:
    """Refuses values the kernel would take to mean something else (v1 reads -1 as no limit)."""
    if limits.cpu_cores is not None and limits.cpu_cores <= 0:
        raise UserError(f"node {node}: the CPU limit must be positive, not {limits.cpu_cores}")
    if limits.memory_bytes is not None and limits.memory_bytes <= 0:
        raise UserError(
            f"node {node}: the memory limit must be positive, not {limits.memory_bytes}"
        )
    cores = os.cpu_count() or 1
    bad = [c for c in limits.cpu_pin if not 0 <= c < cores]
    if bad:
        raise UserError(
            f"node {node} is pinned to core {bad[0]}, but this host has cores 0-{cores - 1}"
        )
