"""A simulated link's shaping options on real packets: emulated hosts send across a simulated
link between two simulated routers, swapped in for real, and what arrives is what the
option means on an emulated link."""

from __future__ import annotations

import csv
import json
import os
from contextlib import closing

import pytest

from nbtest import build, swapping
from nestbed.backend import linux, sim
from nestbed.binaries import probe_recv, probe_send

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("simulator")]

# Gilbert-Elliott loss: P(good→bad) 0.05, P(bad→good) 0.25, every packet lost in the bad
# state: 1/6 of the packets lost, in bursts of 1/0.25 = 4 on average (Bernoulli loss at the
# same rate would give bursts of 1.2).
GE_P, GE_R = 0.05, 0.25
BURSTY = f"""
routing: static
nodes: [{{name: h1}}, {{name: h2}}, {{name: r1, simulated: true}}, {{name: r2, simulated: true}}]
links:
  - {{name: a1, members: [h1, r1]}}
  - {{name: core, members: [r1, r2], bandwidth: 10Mb, delay: 2ms,
     gilbert_elliott: {{p: {GE_P}, r: {GE_R}}}}}
  - {{name: a2, members: [r2, h2]}}
"""


def _bursts(lost: list[bool]) -> list[int]:
    """The lengths of the runs of consecutive losses."""
    runs, current = [], 0
    for gone in lost:
        if gone:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs + ([current] if current else [])


def _model_drops(channel: sim.SimChannel) -> int:
    """What the core's loss model has dropped on the way to r2 so far."""
    ports = channel.request("counters")["links"]["core"]["ports"]
    return ports["r2"]["ingress"]["counters"]["drops"]["loss"]


def test_gilbert_elliott_loss_on_a_simulated_link_comes_in_bursts(tmp_path):
    exp = build(BURSTY).model_copy(update={"name": f"i25dge{os.getpid()}"})
    count = 3000
    with swapping() as swap:
        p = swap(exp)
        address = next(line.split()[0] for line in p.node("h2").hosts.splitlines()
                       if line.endswith(" h2"))  # fmt: skip
        log = tmp_path / "recv.csv"
        receiver = linux.start_in(
            p, "h2", probe_recv(f"{address}:9000", "--idle", "3", "--log", str(log)),
            stdout=open(tmp_path / "recv.json", "w"),  # noqa: SIM115
        )  # fmt: skip
        linux.wait_listening(receiver, 9000, "udp")
        # Addresses resolved on every hop first (ns-3 keeps 3 packets waiting for ARP): one
        # echo of 20 comes back unless the chain stays bad for all of them (p < 0.001).
        warm = ["ping", "-c", "20", "-i", "0.05", "-W", "2", "h2"]
        assert linux.exec_in(p, "h1", warm, capture_output=True).returncode == 0
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            before = _model_drops(channel)
            sent = linux.exec_in(
                p, "h1", probe_send(f"{address}:9000", "--size", "200", "--pps", "1000",
                                    "--count", str(count)),
                capture_output=True, text=True,
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr
            assert receiver.wait(timeout=60) == 0
            drawn = _model_drops(channel) - before
    with log.open() as f:
        arrived = {int(row["seq"]) for row in csv.DictReader(f)}
    assert json.loads(sent.stdout)["packets_sent"] == count
    lost = [seq not in arrived for seq in range(count)]
    bursts = _bursts(lost)
    rate = sum(lost) / count
    mean_burst = sum(bursts) / len(bursts)
    stationary = GE_P / (GE_P + GE_R)
    print(f"lost {sum(lost)} of {count} ({rate:.4f}; stationary {stationary:.4f}) in "
          f"{len(bursts)} bursts of {mean_burst:.2f} on average (expected {1 / GE_R:g})")  # fmt: skip
    # Every loss is the model's: r2's side of the core counted each one it drew.
    assert drawn == sum(lost)
    # The loss fraction of 3000 packets of this chain has a standard deviation of about
    # 0.016 (its packets' states are correlated); the bursts' mean about 0.3.
    assert abs(rate - stationary) < 0.065
    assert 2.8 < mean_burst < 5.3
