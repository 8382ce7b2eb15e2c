"""linktest across hosts when the scheduler answers late, as a busy one does: a tree cut over
three simulated hosts passes levels 1 to 3. Its receivers once ended on a timer counted from
their own start (0.52 s), which ran out before their senders, started through the
scheduler once every receiver was heard listening, sent anything; and its routing datagrams,
sent and drained through the scheduler, arrived after a collection window sized for one
host."""

from __future__ import annotations

import time

import pytest

from nbtest import experiment
from nestbed.backend.cluster import remote
from nestbed.backend.cluster.backend import ClusterBackend
from nestbed.backend.cluster.share import cut_links
from nestbed.backend.plan import plan
from nestbed.linktest.run import LATENCY_PROBES, linktest

pytestmark = pytest.mark.root

LATE_S = 0.6  # longer than a latency receiver's 0.52 s of idle
# A binary tree of six nodes, two a host: cut twice or more over three hosts.
TREE = """
routing: static
nodes: [{name: n0}, {name: n1}, {name: n2}, {name: n3}, {name: n4}, {name: n5}]
links:
""" + "".join(
    f"  - {{name: l{i}, members: [n{(i - 1) // 2}, n{i}], bandwidth: 100Mb, delay: 1ms}}\n"
    for i in range(1, 6)
)


class LateCluster(ClusterBackend):
    """A cluster whose every poll of commands and drain of sockets reaches the hosts LATE_S
    late."""

    def _on_hosts(self, function, args, **how):
        if function in (remote.poll, remote.socket_drain):
            time.sleep(LATE_S)
        return super()._on_hosts(function, args, **how)


def test_linktest_level_3_passes_on_a_tree_over_three_hosts_whose_scheduler_answers_late(
    simulated_cluster,
):
    machines, agents = simulated_cluster
    exp = experiment(TREE, "i21late")
    p = plan(exp)
    with LateCluster(agents.address, state_root=machines.run_dir("controller")) as backend:
        backend.swap_in(p)
        try:
            nodes, _ = backend.placement(p)
            report = linktest(p, exp, 3, backend=backend)
        finally:
            backend.swap_out(p)
    assert len(set(nodes.values())) == 3 and len(cut_links(p, nodes)) >= 2
    counts = report.to_json()["counts"]
    print(f"linktest of a six-node tree over three hosts, polls and drains {LATE_S} s late: "
          f"{counts}, levels {report.level_seconds} s")  # fmt: skip
    # Every probe and datagram arrived: levels 2 and 3 pass, and level 1 measured all 40
    # probes of every direction (a mean delay a busy machine stretched, measured twice, is
    # the machine's, as on one host).
    failed = [(c.level, c.direction, c.measured, c.reason) for c in report.checks
              if c.verdict != "pass"
              and not (c.level == 1 and c.numbers.get("received") == LATENCY_PROBES)]  # fmt: skip
    assert not failed, failed
    levels = [c.level for c in report.checks]
    assert levels.count(1) == levels.count(3) == 10  # both directions of five links
    assert levels.count(2) > 0
