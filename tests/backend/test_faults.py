"""Faults during a run, on real namespaces: the link emulator killed, the results folder's
file system full. The run ends as failed, keeps what it measured, says why in one sentence,
and leaves nothing on the machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from machine import DEADLINE_S, left, manifest, nestbed, processes, state, until
from test_signals import experiment_file, measuring

from nestbed.backend.linux import RUN_DIR
from nestbed.backend.plan import experiment_tag
from nestbed.results.drawing import wait_drawn

pytestmark = pytest.mark.root
# In every name this module gives: a run killed before its teardown (a session stopped
# mid-test) leaves its namespaces and links behind, and the next run must not meet them.
PID = os.getpid()


def test_a_run_whose_link_emulator_is_killed_ends_failed_and_keeps_its_measures(tmp_path):
    name = f"s17linkd{PID}"
    db, results = tmp_path / "store.db", tmp_path / "results"
    process = nestbed(db, "run", str(experiment_file(tmp_path, name)), "--results", str(results))
    try:
        until(lambda: state(db, name) == "active" and measuring(results), "the run to measure")
        linkd = int((RUN_DIR / name / "linkd.pid").read_text())
        rows = len((results / "links" / "counters.csv").read_text().splitlines())
        os.kill(linkd, signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, stderr
    ended = manifest(results)
    assert ended["outcome"] == "failed"
    assert f"nestbed-linkd of experiment {name} exited during the run" in ended["reason"]
    assert f"nestbed-linkd of experiment {name} exited" in stdout
    # What was measured before stays: the counters rows then, the flow tables, the report.
    assert len((results / "links" / "counters.csv").read_text().splitlines()) >= rows
    assert wait_drawn(results)["state"] == "written"  # drawn after the run, on its own
    assert (results / "report.md").exists()
    assert state(db, name) == "swapped"
    assert left(name) == []
    assert processes(str(RUN_DIR / name)) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs of the test's own, unmounted at the end."""
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "s17tmpfs", str(where)],
                   check=True)  # fmt: skip
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_run_whose_results_disk_fills_says_so_and_leaves_nothing(tmp_path, small_disk):
    name = f"s17full{PID}"
    db, results = tmp_path / "store.db", small_disk / "results"
    # Packet captures of a 1 Mb/s CBR fill 256 KiB in about a second.
    process = nestbed(db, "run", str(experiment_file(tmp_path, name)), "--results", str(results),
                      "--capture")  # fmt: skip
    stdout, stderr = process.communicate(timeout=DEADLINE_S)
    said = (stdout + stderr).replace("\n", " ")
    assert process.returncode in (1, 3), said
    assert "is full" in said, said
    # Nothing there passes for a complete run: the manifest is not ended, or ended as failed.
    assert manifest(results).get("outcome") in (None, "running", "failed")
    assert state(db, name) == "swapped"
    assert left(name) == []


CHAIN = """\
set ns [new Simulator]
source tb_compat.tcl
$ns rtproto Static
set a [$ns node]
set r [$ns node]
set b [$ns node]
$ns duplex-link $a $r 10Mb 5ms DropTail
$ns duplex-link $r $b 20Mb 2ms DropTail
$ns run
"""


@pytest.fixture
def foreign():
    """A namespace, a bridge and a veth pair that nestbed never made, removed at the end."""
    ns, br, va, vb = f"s17t{PID}", f"s17b{PID}", f"s17a{PID}", f"s17v{PID}"
    made = [["ip", "netns", "add", ns], ["ip", "link", "add", br, "type", "bridge"],
            ["ip", "link", "add", va, "type", "veth", "peer", "name", vb]]  # fmt: skip
    for argv in made:
        subprocess.run(argv, check=True)

    def present() -> bool:
        return Path(f"/run/netns/{ns}").exists() and all(
            Path(f"/sys/class/net/{x}").exists() for x in (br, va, vb)
        )

    yield present
    for argv in (["ip", "netns", "del", ns], ["ip", "link", "del", br], ["ip", "link", "del", va]):
        subprocess.run(argv, check=False, stderr=subprocess.DEVNULL)


def test_swap_ins_killed_at_any_moment_are_cleaned_up_and_spare_foreign_objects(tmp_path, foreign):
    name = f"s17killed{PID}"
    source = tmp_path / f"{name}.ns"
    source.write_text(CHAIN)
    db = tmp_path / "store.db"
    nestbed(db, "create", str(source)).communicate(timeout=DEADLINE_S)
    # Kill at the start, as the network is being built, and as the controller starts: the
    # moments are placed by what the swap-in has done, not by time.
    stages = [
        lambda: True,
        lambda: any(experiment_tag(name) in t for t in left(name)),
        lambda: (RUN_DIR / name / "controller.json").exists(),
    ]
    for i, reached in enumerate(stages):
        swapin = nestbed(db, "swapin", str(source), "--results", str(tmp_path / f"r{i}"))
        until(lambda r=reached, p=swapin: r() or p.poll() is not None, "the moment to kill")
        swapin.kill()
        swapin.wait()
        if state(db, name) == "active":
            # The swap-in got to its end before the kill (a busy machine polls the moment
            # late): a live experiment, which cleanup rightly spares; it is swapped out.
            _, stderr = nestbed(db, "swapout", name).communicate(timeout=DEADLINE_S)
        cleanup = nestbed(db, "cleanup", name)
        _, stderr = cleanup.communicate(timeout=DEADLINE_S)
        assert cleanup.returncode == 0, stderr
        assert left(name) == [], f"kill {i}"
        assert foreign()
        assert state(db, name) in ("defined", "swapped")


def test_cleanup_of_each_of_several_live_experiments_by_name_spares_them_all(tmp_path):
    names = [f"s17many{i}x{PID}" for i in range(3)]
    db = tmp_path / "store.db"
    for name in names:
        (tmp_path / f"{name}.ns").write_text(CHAIN)
    done = nestbed(db, "create", str(tmp_path / f"{names[0]}.ns"))
    done.communicate(timeout=DEADLINE_S)  # the store exists before the swap-ins race on it
    swapins = [nestbed(db, "swapin", str(tmp_path / f"{n}.ns"), "--results",
                       str(tmp_path / n)) for n in names]  # fmt: skip
    try:
        for p in swapins:
            _, stderr = p.communicate(timeout=DEADLINE_S)
            assert p.returncode == 0, stderr
        for name in names:
            cleanup = nestbed(db, "cleanup", name)
            stdout, _ = cleanup.communicate(timeout=DEADLINE_S)
            assert f"spared {name}: its controller or swap-in is alive" in stdout
        for name in names:
            assert state(db, name) == "active"
            check = nestbed(db, "linktest", name, "--level", "3", "--json")
            stdout, stderr = check.communicate(timeout=DEADLINE_S)
            assert not _broken(json.loads(stdout)), stdout
    finally:
        for name in names:
            nestbed(db, "swapout", name).communicate(timeout=DEADLINE_S)
    assert all(left(n) == [] for n in names)


def _broken(report: dict) -> list[dict]:
    """Failed checks, but for a level-1 mean latency whose probes all arrived: on a loaded
    shared machine, scheduling alone adds milliseconds to it; a link torn down loses them."""
    return [c for c in report["checks"] if c["verdict"] == "fail"
            and (c["level"] != 1 or c["numbers"].get("received") != c["numbers"].get("sent"))]  # fmt: skip
