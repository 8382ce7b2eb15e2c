"""Bad input to `nestbed calibrate`: one clear sentence each, exit 2, before anything is
swapped in (so these need no root and leave nothing behind)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nestbed.errors import UserError
from nestbed.spec import load
from nestbed.studies.calibrate import Settings, check, plan_targets

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def nestbed(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", NESTBED_DB=str(tmp / "db.sqlite"))
    return subprocess.run(
        [sys.executable, "-m", "nestbed", "calibrate", *args, "--results", str(tmp / "r")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def _one_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_payload_below_the_header(tmp_path):
    line = _one_error(nestbed("--sizes", "8,100", tmp=tmp_path))
    assert "packet size 8 B is below the 12-byte probe header" in line
    assert not (tmp_path / "r").exists()


def test_a_burst_too_large_for_memory(tmp_path):
    line = _one_error(nestbed("--bursts", "2000000000", "--topologies", "link", tmp=tmp_path))
    assert "a burst of 2000000000 packets" in line and "use smaller bursts" in line


def test_multicast_on_a_topology_without_a_lan(tmp_path):
    line = _one_error(
        nestbed(
            "--experiment",
            str(EXAMPLES / "dumbbell.ns"),
            "--sender",
            "h1",
            "--receiver-nodes",
            "r1",
            "--multicast",
            tmp=tmp_path,
        )
    )
    assert "multicast needs the sender and receivers on one LAN" in line


def test_a_node_missing_from_the_experiment(tmp_path):
    line = _one_error(
        nestbed(
            "--experiment",
            str(EXAMPLES / "calibrate.ns"),
            "--sender",
            "s",
            "--receiver-nodes",
            "r-1,nobody",
            tmp=tmp_path,
        )
    )
    assert "has no node 'nobody'" in line and "its nodes are" in line


def test_settings_problems_are_reported_together():
    bad = Settings(sizes=(4,), bursts=(0,), repetitions=0, topologies=("ring",))
    with pytest.raises(UserError) as caught:
        check(bad)
    text = str(caught.value)
    for part in ("packet size 4 B", "burst size 0", "--repetitions 0", "topology 'ring'"):
        assert part in text


def test_memory_is_checked_against_what_the_machine_has():
    s = Settings(sizes=(1200,), bursts=(5000,), receivers=20)
    check(s, available_bytes=1 << 40)
    with pytest.raises(UserError, match="more than half the 100 MiB"):
        check(s, available_bytes=100 << 20)


def test_the_built_in_targets():
    targets = plan_targets(Settings.quick())
    keys = [t.key for t in targets]
    assert keys == ["link-untuned", "lan-untuned", "loss-untuned", "link-tuned", "lan-tuned",
                    "loss-tuned"]  # fmt: skip
    lan = targets[1]
    assert lan.multicast and lan.receivers == tuple(f"r{i}" for i in range(1, 9))
    assert lan.experiment.name == "calibrate-lan-untuned"
    loss = targets[2]
    assert loss.configured_loss == 0.05
    assert loss.experiment.links[0].ports[0].egress.loss == pytest.approx(0.05)


def test_a_users_experiment_is_a_target_on_the_link_the_nodes_share():
    exp = load(EXAMPLES / "calibrate.ns").experiment
    (t,) = plan_targets(
        Settings(profiles=("tuned",)), experiment=exp, sender="s",
        receivers=("r-1", "r-2"), multicast=True,
    )  # fmt: skip
    assert t.link == "lan0" and t.topology == "calibrate" and t.profile == "tuned"
    assert t.address("s") == exp.lans[0].port("s").ip
