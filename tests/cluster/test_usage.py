"""Nodes' usage on other hosts (``backend.cluster.usage``), without hosts: a sweep over every
node reads all hosts in one round, and a host that cannot answer fails only its own nodes."""

from __future__ import annotations

import pytest

from nestbed.backend.cluster import usage
from nestbed.backend.cluster.usage import UsageReader


def test_a_sweep_over_every_node_reads_the_hosts_once(monkeypatch):
    # A reading kept longer than the sweep can take on a loaded machine: the test is of the
    # rounds a sweep costs, not of how fast it goes.
    monkeypatch.setattr(usage, "FRESH_S", 60.0)
    rounds = []
    on = {f"n{i}": f"h{i % 4}" for i in range(400)}  # nodes interleaved over four hosts

    def read_hosts():
        rounds.append(1)
        found: dict = {h: {} for h in set(on.values())}
        for node, host in on.items():
            found[host][node] = (float(len(rounds)), 1 << 20)
        return found

    reader = UsageReader(read_hosts)
    seen = [reader.read(host, node) for node, host in on.items()]
    assert len(rounds) == 1
    assert seen == [(1.0, 1 << 20)] * 400
    assert reader.read("h1", "none") is None  # a node without a cgroup there


def test_a_host_that_cannot_answer_fails_its_own_nodes_only():
    reader = UsageReader(lambda: {"h1": {"a": (1.0, 2)}, "h2": TimeoutError("agent gone")})
    assert reader.read("h1", "a") == (1.0, 2)
    with pytest.raises(OSError, match="host h2 did not report its nodes' usage: agent gone"):
        reader.read("h2", "b")
