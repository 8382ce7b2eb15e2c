"""linktest into simulated nodes, for real: levels 1, 3 and 4 (latency, loss, bandwidth)
along every direction of an experiment whose routers are simulated, their probes run by
nestbed-sim, and what they find is what the links were given."""

from __future__ import annotations

import os

import pytest

from nbtest import build, swapping

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("simulator")]

SIMULATED_CORE = """
routing: static
nodes: [{name: h1}, {name: h2}, {name: r1, simulated: true}, {name: r2, simulated: true}]
links:
  - {name: a1, members: [h1, r1], bandwidth: 10Mb, delay: 1ms}
  - {name: core, members: [r1, r2], bandwidth: 2Mb, delay: 10ms, loss: 0.02}
  - {name: a2, members: [r2, h2]}
"""


def test_linktest_measures_links_into_and_between_simulated_nodes():
    from nestbed.backend.linux import LinuxBackend
    from nestbed.linktest.run import linktest

    exp = build(SIMULATED_CORE).model_copy(update={"name": f"i25dlt{os.getpid()}"})
    with swapping() as swap:
        p = swap(exp)
        report = linktest(p, exp, 4, backend=LinuxBackend())
    for c in report.checks:
        print(c.level, c.link, c.direction, c.verdict, c.expected, "|", c.measured, c.reason,
              c.numbers.get("simulator_lag_ms", ""))  # fmt: skip
    tested = {(c.level, c.link, c.direction) for c in report.checks if c.level != 2}
    ends = {"a1": ("h1", "r1"), "core": ("r1", "r2"), "a2": ("r2", "h2")}
    for link, (a, b) in ends.items():
        for src, dst in ((a, b), (b, a)):
            assert (1, link, f"{src} → {dst}") in tested
            assert (3, link, f"{src} → {dst}") in tested
    # Level 4 tests the shaped directions: a1's and the core's, both ways.
    assert {(link, d) for level, link, d in tested if level == 4} == {
        ("a1", "h1 → r1"),
        ("a1", "r1 → h1"),
        ("core", "r1 → r2"),
        ("core", "r2 → r1"),
    }
    # Only a probe leaving the simulator for an emulated node is as late as the simulator is
    # behind real time; its delay's tolerance has that lag, the others' do not.
    lagged = {(c.link, c.direction) for c in report.checks
              if c.level == 1 and "simulator_lag_ms" in c.numbers}  # fmt: skip
    assert lagged == {("a1", "r1 → h1"), ("a2", "r2 → h2")}
    assert not report.failures, [(c.link, c.direction, c.reason) for c in report.failures]
