"""The idle sampler on a recording twin of the back end: the link emulator's egress pipes, the
nodes' interface counters on plain links, their cgroups' CPU time (v1 and v2), and the
errors that leave a sample unjudged."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nbtest import build
from nestbed.backend.cgroups import NodeCgroup
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem
from nestbed.lifecycle.active import Active
from nestbed.server.idle import ActiveSampler, Sessions, sent_on

EXP = build("""
    nodes: [{name: a}, {name: b}]
    links:
      - {name: shaped, members: [a, b], delay: 1ms}
      - {name: plain, members: [a, b]}
""")
PROC_NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0:    9000      90    0    0    0     0          0         0     7000      70    0    0    0     0       0          0
  eth1:    5000      50    0    0    0     0          0         0     {tx_bytes}      {tx}    0    0    0     0       0          0
"""


def pipes(sent: dict[str, int]) -> dict[str, Any]:
    def counters(n: int) -> dict[str, Any]:
        return {"packets_in": n, "bytes_in": 100 * n, "packets_out": n, "bytes_out": 100 * n,
                "queue_packets": 0, "queue_bytes": 0, "drops": {}}  # fmt: skip

    return {"ok": True, "links": {"shaped": {"ports": {
        node: {"egress": {"counters": counters(n)}, "ingress": {"counters": counters(10**6)}}
        for node, n in sent.items()}}}}  # fmt: skip


class Twin:
    """Answers as a back end would: scripted linkd counters and interface counters, cgroups in
    a folder. ``linkd_down`` makes the link emulator refuse."""

    name = "twin"

    def __init__(self, root: Path, cgroups: dict[str, NodeCgroup]):
        self.state_root = root
        self.cgroups = cgroups
        self.sent = {"a": 0, "b": 0}
        self.tx = {"a": 0, "b": 0}
        self.linkd_down = False
        self.execs: list[tuple[str, list[str]]] = []

    def run_dir(self, p):  # type: ignore[no-untyped-def]
        return self.state_root / p.experiment

    def linkd(self, p):  # type: ignore[no-untyped-def]
        if self.linkd_down:
            raise ConnectionRefusedError("refused")
        twin = self

        class Channel:
            def request(self, op: str, **_: Any) -> dict[str, Any]:
                assert op == "counters"
                return pipes(twin.sent)

            def close(self) -> None:
                pass

        return Channel()

    def exec_in(self, p, node, argv, **run):  # type: ignore[no-untyped-def]
        self.execs.append((node, argv))
        text = PROC_NET_DEV.format(tx=self.tx[node], tx_bytes=1000 * self.tx[node])
        return subprocess.CompletedProcess(argv, 0, text, "")

    def node_cgroup(self, p, node):  # type: ignore[no-untyped-def]
        return self.cgroups.get(node)


def v1(root: Path, usage_ns: int) -> NodeCgroup:
    d = root / "cpuacct"
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpuacct.usage").write_text(f"{usage_ns}\n")
    return NodeCgroup("nb-x-a", 1, {"cpuacct": d, "cpu": root / "cpu"})


def v2(root: Path, usage_us: int) -> NodeCgroup:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.stat").write_text(f"usage_usec {usage_us}\nuser_usec 1\nsystem_usec 2\n")
    return NodeCgroup("nb-x-b", 2, {"cpu": root, "memory": root})


@pytest.fixture
def twin(tmp_path):
    return Twin(
        tmp_path, {"a": v1(tmp_path / "v1", 2_500_000_000), "b": v2(tmp_path / "v2", 750_000)}
    )


def sampler(twin, sessions=None, t=100.0):
    p = plan(EXP)
    return ActiveSampler(Active(EXP.name, p, EXP, twin), sessions or Sessions(), lambda: t)


def test_a_sample_adds_the_shaped_links_egress_and_the_plain_links_sent_packets(twin):
    twin.sent, twin.tx = {"a": 7, "b": 3}, {"a": 20, "b": 1}
    s = sampler(twin).sample()
    # ingress pipes would count the same packets again: only egress is read
    assert (s.t_s, s.packets, s.bytes) == (100.0, 7 + 3 + 20 + 1, 100 * 10 + 1000 * 21)
    # the interface on the plain link is each node's second (eth1); eth0 is the shaped one's
    assert sorted(node for node, _ in twin.execs) == ["a", "b"]
    assert twin.execs[0][1] == ["cat", "/proc/net/dev"]


def test_cpu_time_is_read_from_cgroup_v1_and_v2(twin):
    s = sampler(twin).sample()
    assert s.cpu_s == {"a": 2.5, "b": 0.75}


def test_a_node_without_a_cgroup_is_left_out(twin):
    del twin.cgroups["a"]
    assert sampler(twin).sample().cpu_s == {"b": 0.75}


def test_open_sessions_are_counted(twin):
    sessions = Sessions()
    with sessions.opened(EXP.name):
        assert sampler(twin, sessions).sample().sessions == 1


def test_a_silent_link_emulator_leaves_the_sample_unjudged(twin):
    twin.linkd_down = True
    with pytest.raises(EnvironmentProblem, match="cannot read the link emulator of experiment"):
        sampler(twin).sample()


def test_sent_on_reads_only_the_named_interfaces():
    text = PROC_NET_DEV.format(tx=4, tx_bytes=400)
    assert sent_on(text, ["eth1"]) == (4, 400)
    assert sent_on(text, ["eth0", "eth1"]) == (74, 7400)
    assert sent_on(text, []) == (0, 0)
