"""cgroups: limits and accounting on this host's real hierarchy, and the v1/v2 logic on fake trees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nestbed.backend.cgroups import PARENT, V1_MARKERS, Cgroups, Limits, _cpulist
from nestbed.errors import EnvironmentProblem, UserError

MiB = 1 << 20
BUSY = [sys.executable, "-c", "while True: pass"]


def busy_in(cg) -> subprocess.Popen:
    """A busy loop started in cg, once it runs there: its shell joins every hierarchy of the
    cgroup in turn (cpu before cpuset on v1) and only then execs the loop."""
    proc = subprocess.Popen(cg.entered(BUSY))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not _exec_done(proc.pid):
        time.sleep(0.005)
    return proc


def _exec_done(pid: int) -> bool:
    """Whether the loop itself runs: right after the fork the child is still a copy of this
    process, then the shell; only the loop's command line is the loop's."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [
            a.encode() for a in BUSY
        ]
    except OSError:
        return False


def mine(cgroups: Cgroups, tag: str) -> list[str]:
    return [n for n in cgroups.leftovers() if n.startswith(f"nb-{tag}-")]


@pytest.fixture
def host():
    """This host's cgroups, a tag no other run uses, and busy children killed whatever happens."""
    try:
        cgroups = Cgroups.detect()
    except EnvironmentProblem as exc:
        pytest.skip(str(exc))
    tag = f"t{os.getpid()}"
    started: list[subprocess.Popen] = []

    def start(cg):
        started.append(busy_in(cg))
        return started[-1]

    try:
        yield SimpleNamespace(cgroups=cgroups, tag=tag, start=start)
    finally:
        try:
            cgroups.remove(tag)
        finally:
            for proc in started:
                proc.kill()
                proc.wait()
    assert not mine(cgroups, tag)


@pytest.mark.root
def test_a_command_entered_into_a_cgroup_is_in_it_from_its_first_instruction(host):
    cg = host.cgroups.create(host.tag, "n1", Limits(cpu_cores=0.5))
    # cat reads its own cgroups: it is in the node's before it runs at all.
    lines = subprocess.run(cg.entered(["cat", "/proc/self/cgroup"]), capture_output=True,
                           text=True, check=True).stdout.splitlines()  # fmt: skip
    mine = {line.split(":", 2)[2] for line in lines if line.endswith(cg.name)}
    assert mine == {f"/{PARENT}/{cg.name}"}
    assert len([line for line in lines if line.endswith(cg.name)]) == len(cg.paths)


@pytest.mark.root
def test_limits_and_accounting_on_this_host(host):
    cgroups, tag = host.cgroups, host.tag
    cg = cgroups.create(tag, "n1", Limits(cpu_cores=0.2, memory_bytes=64 * MiB))
    if cgroups.version == 1:
        assert (cg.dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "20000"
        assert (cg.dirs["memory"] / "memory.limit_in_bytes").read_text().strip() == str(64 * MiB)
    else:
        assert (cg.dirs["cpu"] / "cpu.max").read_text().strip() == "20000 100000"
    proc = host.start(cg)
    assert cg.pids() == [proc.pid]
    before, start = cg.cpu_seconds(), time.monotonic()
    time.sleep(1.5)
    rate = (cg.cpu_seconds() - before) / (time.monotonic() - start)
    # A busy loop takes a whole core unless the quota holds it near 0.2; the bound is generous.
    assert 0 < rate < 0.5
    assert cg.memory_bytes() > 0
    assert cgroups.open(tag, "n1").pids() == [proc.pid]

    pinned = cgroups.create(tag, "n2", Limits(cpu_pin=(0,)))
    child = host.start(pinned)
    status = Path(f"/proc/{child.pid}/status").read_text()
    assert "Cpus_allowed_list:\t0\n" in status

    with pytest.raises(UserError, match=r"n3.*9999"):
        cgroups.create(tag, "n3", Limits(cpu_pin=(9999,)))
    # Below the kernel's minimum quota (1 ms per period): refused by the kernel, not by nestbed.
    with pytest.raises(UserError, match=r"0\.001 cores for node n4"):
        cgroups.create(tag, "n4", Limits(cpu_cores=0.001))
    assert mine(cgroups, tag) == [f"nb-{tag}-n1", f"nb-{tag}-n2"]

    assert cgroups.remove(tag) == [f"nb-{tag}-n1", f"nb-{tag}-n2"]
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert child.wait(timeout=5) == -signal.SIGKILL
    assert not mine(cgroups, tag)
    assert not any(d.exists() for d in cg.paths + pinned.paths)


@pytest.fixture
def sandbox(tmp_path):
    """A private subtree of the real hierarchy that Cgroups sees as its root, so cleanup() in a
    test cannot touch the cgroups of a real experiment; removed whatever happens."""
    try:
        host = Cgroups.detect()
    except EnvironmentProblem as exc:
        pytest.skip(str(exc))
    name = f"nestbed-test-{os.getpid()}"
    tops = [h / name for h in dict.fromkeys(host.hierarchies.values())]
    try:
        for top in tops:
            top.mkdir()
        if host.version == 2:
            (host.root / "cgroup.subtree_control").write_text("+cpu +memory +cpuset")
            yield Cgroups.detect(tops[0])
        else:
            for controller, hierarchy in host.hierarchies.items():
                (tmp_path / controller).symlink_to(hierarchy / name)
            if "cpuset" in host.hierarchies:
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (tmp_path / "cpuset" / f).write_text(
                        (host.hierarchies["cpuset"] / f).read_text()
                    )
            yield Cgroups.detect(tmp_path)
    finally:
        for top in tops:
            for parent, dirs, _files in os.walk(top, topdown=False):
                for d in dirs:
                    os.rmdir(Path(parent) / d)
            if top.exists():
                os.rmdir(top)


@pytest.mark.root
def test_cleanup_removes_only_nestbed_cgroups(sandbox):
    a = sandbox.create("aaaa", "n1", Limits(cpu_cores=0.5))
    sandbox.create("bbbb", "n1", Limits(memory_bytes=32 * MiB))
    proc = busy_in(a)
    try:
        memory = sandbox.hierarchies["memory"]
        foreign = [memory / PARENT / "other", memory / "nb-not-under-parent"]
        for d in foreign:
            d.mkdir()
        assert sandbox.leftovers() == ["nb-aaaa-n1", "nb-bbbb-n1"]
        assert sandbox.cleanup() == ["nb-aaaa-n1", "nb-bbbb-n1"]
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert sandbox.leftovers() == []
        assert all(d.is_dir() for d in foreign)
    finally:
        proc.kill()
        proc.wait()


# The logic on fake trees: no root needed. The kernel makes a cgroup's interface files at mkdir
# and removes them at rmdir; these tests write the files they read, and rmdir drops the files.


@pytest.fixture
def fake_kernel(monkeypatch):
    real_rmdir = os.rmdir

    def rmdir(path):
        for f in Path(path).iterdir():
            if f.is_file():
                f.unlink()
        real_rmdir(path)

    monkeypatch.setattr(os, "rmdir", rmdir)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)


def fake_v2(root: Path, controllers: str = "cpuset cpu io memory hugetlb pids") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def fake_v1(root: Path, controllers=("cpu", "cpuacct", "memory", "cpuset")) -> Path:
    for controller in controllers:
        (root / controller).mkdir(parents=True)
        (root / controller / V1_MARKERS[controller]).write_text("0\n")
    if "cpuset" in controllers:
        (root / "cpuset" / "cpuset.cpus").write_text("0-7\n")
        (root / "cpuset" / "cpuset.mems").write_text("0\n")
    return root


def read(path: Path) -> str:
    return path.read_text().strip()


def test_detect_picks_v2_or_v1_or_explains(tmp_path):
    assert Cgroups.detect(fake_v2(tmp_path / "v2")).version == 2
    assert Cgroups.detect(fake_v1(tmp_path / "v1")).version == 1
    assert Cgroups.detect(fake_v1(tmp_path / "nocpuset", ("cpu", "cpuacct", "memory"))).version == 1
    # This machine's layout minus v1: an empty cgroup2 mount beside, not at, the root.
    fake_v2(tmp_path / "hybrid" / "unified", controllers="hugetlb")
    for root in (tmp_path / "empty", tmp_path / "hybrid", fake_v2(tmp_path / "poor", "cpu io")):
        root.mkdir(exist_ok=True)
        with pytest.raises(EnvironmentProblem, match="no usable cgroups under"):
            Cgroups.detect(root)
    with pytest.raises(EnvironmentProblem):
        Cgroups.detect(fake_v1(tmp_path / "nomemory", ("cpu", "cpuacct")))


def test_v2_writes_the_limits_and_reads_usage(tmp_path, fake_kernel):
    cgroups = Cgroups.detect(fake_v2(tmp_path))
    cg = cgroups.create("tag1", "n1", Limits(cpu_cores=0.2, cpu_pin=(0, 1), memory_bytes=64 * MiB))
    d = tmp_path / "nestbed" / "nb-tag1-n1"
    assert cg.name == "nb-tag1-n1" and cg.paths == [d]
    assert read(d / "cpu.max") == "20000 100000"
    assert read(d / "memory.max") == str(64 * MiB)
    assert read(d / "cpuset.cpus") == "0-1"
    for parent in (tmp_path, tmp_path / "nestbed"):
        assert read(parent / "cgroup.subtree_control") == "+cpu +memory +cpuset"

    (d / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    (d / "memory.current").write_text("4096\n")
    (d / "cgroup.procs").write_text("")
    opened = cgroups.open("tag1", "n1")
    assert opened.cpu_seconds() == 2.5 and opened.memory_bytes() == 4096 and opened.pids() == []
    opened.add(1234)
    assert read(d / "cgroup.procs") == "1234"
    (d / "cgroup.procs").write_text("")
    (d / "cgroup.kill").write_text("0")
    opened.kill()
    assert read(d / "cgroup.kill") == "1"

    cgroups.create("tag2", "n1", Limits())
    assert cgroups.leftovers() == ["nb-tag1-n1", "nb-tag2-n1"]
    assert cgroups.remove("tag1") == ["nb-tag1-n1"]
    assert not d.exists() and cgroups.leftovers() == ["nb-tag2-n1"]
    with pytest.raises(UserError, match="node n1 has no cgroup nb-tag1-n1"):
        cgroups.open("tag1", "n1")


def test_v1_writes_the_limits_in_each_hierarchy(tmp_path, fake_kernel):
    cgroups = Cgroups.detect(fake_v1(tmp_path))
    cg = cgroups.create("tag1", "n1", Limits(cpu_cores=1.5, cpu_pin=(0, 1, 2, 5), memory_bytes=MiB))
    node = {
        c: tmp_path / c / "nestbed" / "nb-tag1-n1" for c in ("cpu", "cpuacct", "memory", "cpuset")
    }
    assert cg.paths == list(node.values())
    assert read(node["cpu"] / "cpu.cfs_quota_us") == "150000"
    assert read(node["cpu"] / "cpu.cfs_period_us") == "100000"
    assert read(node["memory"] / "memory.limit_in_bytes") == str(MiB)
    assert not (node["memory"] / "memory.memsw.limit_in_bytes").exists()
    # A v1 cpuset takes no tasks before it has cpus and mems, and neither does its parent.
    assert read(tmp_path / "cpuset" / "nestbed" / "cpuset.cpus") == "0-7"
    assert read(tmp_path / "cpuset" / "nestbed" / "cpuset.mems") == "0"
    assert read(node["cpuset"] / "cpuset.mems") == "0"
    assert read(node["cpuset"] / "cpuset.cpus") == "0-2,5"

    (node["cpuacct"] / "cpuacct.usage").write_text("1500000000\n")
    (node["memory"] / "memory.usage_in_bytes").write_text("8192\n")
    assert cg.cpu_seconds() == 1.5 and cg.memory_bytes() == 8192

    # Unpinned nodes stay out of the cpuset hierarchy.
    assert cgroups.create("tag1", "n2", Limits()).dirs.keys() == {"cpu", "cpuacct", "memory"}
    assert cgroups.remove("tag1") == ["nb-tag1-n1", "nb-tag1-n2"]
    assert not any(d.exists() for d in node.values()) and cgroups.leftovers() == []


def test_bad_limits_are_refused_and_leave_nothing(tmp_path, fake_kernel):
    cgroups = Cgroups.detect(fake_v2(tmp_path))
    for limits, message in [
        (Limits(cpu_pin=(9999,)), "node n1 is pinned to core 9999, but this host has cores 0-7"),
        (Limits(cpu_cores=0), "node n1: the CPU limit must be positive, not 0"),
        (Limits(memory_bytes=-1), "node n1: the memory limit must be positive, not -1"),
    ]:
        with pytest.raises(UserError) as caught:
            cgroups.create("tag1", "n1", limits)
        assert str(caught.value) == message
    assert cgroups.leftovers() == []

    cgroups.create("tag1", "n1", Limits())
    with pytest.raises(EnvironmentProblem, match="cgroup nb-tag1-n1 already exists"):
        cgroups.create("tag1", "n1", Limits())

    v1 = Cgroups.detect(fake_v1(tmp_path / "v1", ("cpu", "cpuacct", "memory")))
    with pytest.raises(EnvironmentProblem, match="node n1 is pinned to cores, but the cgroup v1"):
        v1.create("tag1", "n1", Limits(cpu_pin=(0,)))
    assert v1.leftovers() == []


def test_a_refused_write_removes_what_create_made(tmp_path, fake_kernel, monkeypatch):
    cgroups = Cgroups.detect(fake_v1(tmp_path))
    real_open = open

    def refusing_open(path, *args, **kwargs):
        if str(path).endswith("memory.limit_in_bytes") and "nb-" in str(path):
            raise OSError(22, "Invalid argument")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refusing_open)
    with pytest.raises(UserError) as caught:
        cgroups.create("tag1", "n1", Limits(cpu_cores=1, memory_bytes=4096))
    assert str(caught.value) == (
        "the memory limit of 4096 bytes for node n1 was refused by the kernel (Invalid argument)"
    )
    assert cgroups.leftovers() == []
    assert not list((tmp_path / "cpu" / "nestbed").iterdir())


def test_fake_cleanup_keeps_what_is_not_nestbeds(tmp_path, fake_kernel):
    for cgroups in (
        Cgroups.detect(fake_v2(tmp_path / "v2")),
        Cgroups.detect(fake_v1(tmp_path / "v1")),
    ):
        cgroups.create("aaaa", "n1", Limits())
        cgroups.create("bbbb", "n2", Limits(cpu_pin=(3,)))
        parent = cgroups.hierarchies["memory"] / PARENT
        (parent / "other").mkdir()
        (parent / "nb-file").write_text("not a cgroup")
        assert cgroups.cleanup() == ["nb-aaaa-n1", "nb-bbbb-n2"]
        assert cgroups.leftovers() == []
        assert (parent / "other").is_dir() and (parent / "nb-file").is_file()


def test_removing_the_last_experiment_removes_nestbeds_parent_cgroups(tmp_path, fake_kernel):
    for cgroups in (
        Cgroups.detect(fake_v2(tmp_path / "v2")),
        Cgroups.detect(fake_v1(tmp_path / "v1")),
    ):
        cgroups.create("aaaa", "n1", Limits(cpu_pin=(1,)))
        cgroups.create("bbbb", "n1", Limits())
        parents = {h / PARENT for h in cgroups.hierarchies.values()}
        cgroups.remove("aaaa")
        # bbbb still has its cgroups there, except under cpuset, which only aaaa used.
        kept = {cgroups.hierarchies[c] / PARENT for c in ("cpu", "memory")}
        assert all(p.is_dir() for p in kept)
        assert cgroups.version == 2 or not (cgroups.hierarchies["cpuset"] / PARENT).exists()
        cgroups.remove("bbbb")
        assert not any(p.exists() for p in parents)


def test_cpulist():
    assert _cpulist((5, 0, 1, 2, 2)) == "0-2,5"
    assert _cpulist((3,)) == "3"
