"""nestbed-sim's attachments (csrc/nestbed-sim/attach.h), for real: frames read from an
attachment many at a time all cross the simulation, and each frame's wait between the kernel
and the simulation is measured, given up from a simulated link's delay (never more than the
frame waited, so no frame arrives sooner than the link's delay after it was sent), and what
no link could give up is counted as the frame leaves through the other attachment."""

from __future__ import annotations

import csv
import json
import os
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from nbtest import build, receiving, swapping
from nestbed.backend import linux, sim
from nestbed.binaries import KERNEL_TIMES, probe_recv, probe_send

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("simulator")]


def _chain(delay_ms: int) -> str:
    """Emulated h1 and h2 joined through simulated r1 and r2, whose core has DELAY_MS."""
    core = f", delay: {delay_ms}ms" if delay_ms else ""
    return f"""
routing: static
nodes: [{{name: h1}}, {{name: h2}}, {{name: r1, simulated: true}}, {{name: r2, simulated: true}}]
links:
  - {{name: a1, members: [h1, r1]}}
  - {{name: core, members: [r1, r2]{core}}}
  - {{name: a2, members: [r2, h2]}}
"""


def _warm(p: Any) -> None:
    """Addresses resolved on every hop first, so that the timings below are the links'."""
    warm = ["ping", "-c", "5", "-i", "0.05", "-W", "2", "h2"]
    assert linux.exec_in(p, "h1", warm, capture_output=True).returncode == 0


def test_a_burst_of_frames_all_crosses(tmp_path):
    """10 000 datagrams at 50 000 a second, faster than nestbed-sim forwards them, wait in the
    attachment's socket and are read many at a time: every one reaches h2, each once."""
    count = 10_000
    exp = build(_chain(0)).model_copy(update={"name": f"i25rburst{os.getpid()}"})
    with swapping() as swap:
        p = swap(exp)
        _warm(p)
        address, receiver, log = receiving(p, "h2", tmp_path, idle_s=3)
        sent = linux.exec_in(
            p, "h1", probe_send(f"{address}:9000", "--size", "18", "--pps", "50000",
                                "--count", str(count)),
            capture_output=True, text=True,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        assert receiver.wait(timeout=60) == 0
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            waits = channel.request("waits")["waits"]
    with log.open() as f:
        seqs = [int(row["seq"]) for row in csv.DictReader(f)]
    print(f"sent {json.loads(sent.stdout)['packets_sent']}, received {len(seqs)} "
          f"({len(set(seqs))} distinct); the simulator read {waits['wait']['count']} frames, "
          f"dropped {waits['dropped']}")  # fmt: skip
    assert json.loads(sent.stdout)["packets_sent"] == count
    assert sorted(seqs) == list(range(count))
    assert waits["dropped"] == 0 and waits["wait"]["count"] >= count


def _across(delay_ms: int, tmp_path: Path) -> tuple[list[int], dict[str, Any]]:
    """500 datagrams from h1 to h2 across a core of DELAY_MS, timed by the kernel at h2: their
    one-way delays (ns) and nestbed-sim's waits."""
    count = 500
    exp = build(_chain(delay_ms)).model_copy(update={"name": f"i25rwait{os.getpid()}"})
    with swapping() as swap:
        p = swap(exp)
        _warm(p)
        address = exp.links[2].port("h2").ip
        log = tmp_path / "recv.csv"
        receiver = linux.start_in(
            p, "h2", probe_recv(f"{address}:9000", "--idle", "2", "--log", str(log),
                                KERNEL_TIMES),
            stdout=open(tmp_path / "recv.json", "w"),  # noqa: SIM115
        )  # fmt: skip
        linux.wait_listening(receiver, 9000, "udp")
        sent = linux.exec_in(
            p, "h1", probe_send(f"{address}:9000", "--size", "18", "--pps", "1000",
                                "--count", str(count)),
            capture_output=True, text=True,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        assert receiver.wait(timeout=60) == 0
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            waits = channel.request("waits")["waits"]
    with log.open() as f:
        delays = [int(row["delay_ns"]) for row in csv.DictReader(f)]
    assert len(delays) == count
    return delays, waits


@pytest.mark.parametrize("delay_ms", [0, 5])
def test_a_frames_wait_is_given_up_from_the_delay_and_counted(delay_ms, tmp_path):
    """Every frame into the simulator waited a while after the kernel received it (never
    less than nothing). A 5 ms core gives those waits up from its delay, and no datagram
    arrives sooner than 5 ms after it was sent; a core with no delay has nothing to give
    up, so the frames leave with all of it. What is given up and what is kept are parts of
    what the frames waited."""
    delays, waits = _across(delay_ms, tmp_path)
    wait = waits["wait"]
    print(f"core {delay_ms} ms: one-way {min(delays) / 1e6:.4f} to {max(delays) / 1e6:.4f} ms; "
          f"waits {wait}; given up {waits['given_up_ns']} ns, kept {waits['kept_ns']} ns, "
          f"lateness out {waits['out_late']}")  # fmt: skip
    assert wait["count"] >= len(delays) and wait["min_ns"] >= 0 and waits["unstamped"] == 0
    assert 0 < waits["given_up_ns"] + waits["kept_ns"] <= wait["sum_ns"]
    if delay_ms:
        assert waits["given_up_ns"] > 0
        assert min(delays) >= delay_ms * 1_000_000
    else:
        assert waits["given_up_ns"] == 0
