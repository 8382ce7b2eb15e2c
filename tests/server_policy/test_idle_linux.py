"""Idle detection on a real experiment (root): a tiny two-node experiment swapped in on the
Linux back end reads idle; pings over its shaped link (the link emulator's counters) and over
its plain link (the nodes' interface counters), and a busy loop in a node, read busy."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from nbtest import experiment
from nestbed.model.options import RunOptions
from nestbed.server.idle import ActiveSampler, IdleSettings, Sample, Sessions, activity
from nestbed.store import State, Store

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create network namespaces"),
]
TEXT = """
    nodes: [{name: a}, {name: b}]
    links:
      - {name: shaped, members: [a, b], delay: 1ms}
      - {name: plain, members: [a, b]}
"""
PINGS = 50
SETTINGS = IdleSettings()


@pytest.fixture
def active(tmp_path):
    """The experiment swapped in for the test, swapped out and checked gone however it ends."""
    from nestbed.backend.linux import LinuxBackend
    from nestbed.backend.plan import experiment_tag
    from nestbed.lifecycle import Testbed

    exp = experiment(TEXT, "i22p-idle")
    backend = LinuxBackend()
    with Store.open(str(tmp_path / "store.db")) as store:
        testbed = Testbed(store, backend)
        testbed.define(exp)
        try:
            yield testbed.swap_in(exp.name, RunOptions(results=tmp_path / "results"))
        finally:
            if store.get(exp.name).state not in (State.DEFINED, State.SWAPPED):
                testbed.swap_out(exp.name)
    assert experiment_tag(exp.name) not in backend.leftovers()


def window(sampler: ActiveSampler, seconds: float) -> tuple[Sample, Sample]:
    first = sampler.sample()
    time.sleep(seconds)
    return first, sampler.sample()


def ping(active, link: str) -> tuple[Sample, Sample]:  # type: ignore[no-untyped-def]
    address = _ip(active, link)
    sampler = ActiveSampler(active, Sessions())
    before = sampler.sample()
    done = active.exec("a", ["ping", "-q", "-c", str(PINGS), "-i", "0.01", "-W", "2", address],
                       capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return before, sampler.sample()


def _ip(active, link: str) -> str:  # type: ignore[no-untyped-def]
    (found,) = [x for x in active.experiment.links if x.name == link]
    return found.port("b").ip


def test_a_quiet_experiment_reads_idle_and_traffic_and_cpu_read_busy(active):
    sampler = ActiveSampler(active, Sessions())
    quiet = window(sampler, 2.0)
    assert set(quiet[1].cpu_s) == {"a", "b"}  # both nodes' cgroups were read
    assert activity(*quiet, SETTINGS) == ""

    for link in ("shaped", "plain"):
        before, after = ping(active, link)
        # every request out of a and every reply out of b, whichever counters saw them
        assert after.packets - before.packets >= 2 * PINGS, link
        assert "packets/s sent into its links" in activity(before, after, SETTINGS), link

    loop = active.start("b", ["sh", "-c", "while :; do :; done"], stdout=subprocess.DEVNULL)
    try:
        busy = window(sampler, 2.0)
    finally:
        loop.kill()
        loop.wait()
    assert busy[1].cpu_s["b"] > busy[0].cpu_s["b"]
    assert activity(*busy, SETTINGS).startswith("node b used")

    sessions = Sessions()
    with sessions.opened(active.name):
        assert activity(*quiet, SETTINGS) == ""
        assert ActiveSampler(active, sessions).sample().sessions == 1
