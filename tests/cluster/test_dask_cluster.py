"""The cluster back end end to end on simulated hosts: a Dask scheduler on the underlay, one
`nestbed agent` (a Dask worker) inside each host's namespace, and ClusterBackend placing a
dumbbell with the mapper, swapping it in on both hosts, running commands in its nodes and
swapping it out; a host that fails its part leaves nothing on the others."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import signal
import subprocess
import threading
import time

import pytest
from simulated import DUMBBELL, interfaces, namespaces, processes, unbuilt_checkout

from nbtest import EXAMPLES, experiment, until
from nestbed.backend.cluster import host as host_part
from nestbed.backend.cluster import remote, slots
from nestbed.backend.cluster.backend import LINK_ANSWER_S, ClusterBackend
from nestbed.backend.cluster.host import BUILDING
from nestbed.backend.cluster.placement import place
from nestbed.backend.cluster.share import cut_links
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem, Held

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def cluster(simulated_cluster):
    """The session's three simulated hosts (each agent holding at most two nodes), and the
    back end reaching them through the scheduler on the underlay."""
    machines, agents = simulated_cluster
    backend = ClusterBackend(agents.address, state_root=machines.run_dir("controller"))
    yield machines, backend, agents
    backend.close()


@pytest.fixture
def swapped(cluster):
    """Swaps plans in through the back end; swaps them out at the end however the test ended
    and checks every host kept nothing of them."""
    machines, backend, _ = cluster
    made = []

    def swap_in(p):
        made.append(p)
        backend.swap_in(p)
        return p

    yield swap_in
    for p in made:
        backend.swap_out(p)
    for p in made:
        assert not [n for n in namespaces() if n.startswith(f"nb-{p.tag}")]
        for host in machines.hosts:
            assert not (machines.run_dir(host) / p.experiment).exists()
            assert not processes(str(machines.run_dir(host) / p.experiment))
        assert not backend.run_dir(p).exists()


def test_a_dumbbell_is_placed_cut_at_its_bottleneck_swapped_in_and_pinged_across(cluster, swapped):
    machines, backend, _ = cluster
    exp = experiment(DUMBBELL, "i21dask")
    p = swapped(plan(exp))
    nodes, underlay = backend.placement(p)
    # Two nodes a host: the mapper cuts the slowest link, the bottleneck.
    assert nodes["h1"] == nodes["r1"] != nodes["r2"] == nodes["h3"]
    # The underlay's MTU is found on the hosts' routes (jumbo here): the cut link carries
    # 1500-byte packets, as a link on one host does, and they arrive whole.
    assert underlay.mtu == machines.mtu == 9000 and underlay.link_mtu == 1500
    whole = backend.exec_in(p, "h1", ["ping", "-n", "-c", "2", "-i", "0.2", "-M", "do", "-s",
                                      "1472", "h3"], capture_output=True, text=True)  # fmt: skip
    assert whole.returncode == 0 and "1480 bytes from" in whole.stdout, whole.stdout
    ping = backend.exec_in(p, "h1", ["ping", "-n", "-c", "4", "-i", "0.2", "h3"],
                           capture_output=True, text=True)  # fmt: skip
    assert ping.returncode == 0, ping.stdout + ping.stderr
    rtt_min_ms = float(ping.stdout.split(" = ")[1].split("/")[0])
    print(f"ping h1 -> h3 through ClusterBackend: min RTT {rtt_min_ms:.3f} ms (link 2 x 20 ms)")
    # The bottleneck's sending pipes gave up the underlay's typical one-way time (see host).
    given_up_ms = 1e3 * sum(underlay.delays_s[nodes[a]][nodes[b]]
                            for a, b in (("r1", "r2"), ("r2", "r1")))  # fmt: skip
    assert 40 - given_up_ms <= rtt_min_ms < 60
    hosts = backend.exec_in(p, "h3", ["getent", "hosts", "h1"], capture_output=True, text=True)
    assert hosts.stdout.split()[0] == exp.links[0].port("h1").ip


def test_a_host_that_fails_its_part_leaves_nothing_on_the_others(cluster):
    machines, backend, _ = cluster
    p = plan(experiment(DUMBBELL, "i21fail"))
    # A namespace of one node exists already on its host: that host refuses its part.
    taken = p.node("h3").netns
    where = place(p, backend.facts())["h3"]
    subprocess.run(["ip", "netns", "add", taken], check=True)
    try:
        with pytest.raises(EnvironmentProblem, match=f"failed on host {where}: .*{taken} of"):
            backend.swap_in(p)
        assert [n for n in namespaces() if n.startswith(f"nb-{p.tag}")] == [taken]
        for host in machines.hosts:
            assert not (machines.run_dir(host) / p.experiment).exists()
        assert not backend.run_dir(p).exists()
    finally:
        subprocess.run(["ip", "netns", "delete", taken], check=True)


def _nothing_of(p, machines, backend) -> list[str]:
    """What experiment ``p`` has anywhere: namespaces, cgroups, state folders on every host
    and here (``leftovers``), its claims and build notes on each host, processes naming its
    state folders."""
    found = [f"{p.tag}: {t}" for t in backend.leftovers().get(p.tag, [])]
    found += [n for n in namespaces() if n.startswith(f"nb-{p.tag}")]
    for h in machines.hosts:
        root = machines.run_dir(h)
        for path in (root / p.experiment, root / ".claims" / p.tag, root / BUILDING / p.experiment,
                     root / slots.LEDGER / p.tag, machines.work_dir(h) / p.experiment):  # fmt: skip
            if path.exists():
                found.append(f"host {h}: {path}")
        found += [f"host {h}: process {c}" for c in processes(str(root / p.experiment))]
    return found


def _host_interfaces(machines) -> dict[str, set[str]]:
    """Every interface of each simulated host's own namespace (where VXLAN devices are made)."""
    found = {}
    for h, namespace in machines.namespaces.items():
        out = subprocess.run(["ip", "-n", namespace, "-br", "link"], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        found[h] = {line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()}
    return found


@pytest.mark.parametrize(
    "breakage",
    [
        {"NESTBED_LINKD": "/nonexistent/nestbed-linkd"},  # a path that does not exist
        {"NESTBED_LINKD": "/bin/false"},  # a program that exits at once
        "unbuilt",  # a fresh checkout's: "nestbed-linkd is not built"
    ],
    ids=["missing", "exits", "unbuilt"],
)
def test_a_host_whose_link_emulator_cannot_start_fails_the_swap_in_and_leaves_nothing_anywhere(
    cluster, breakage, tmp_path
):
    """A host without a working nestbed-linkd (a fresh clone's run left three namespaces of
    one host's part, no process in them): its agent is started, as an operator could start
    it, with a linkd that does not start. The swap-in fails in one sentence naming that host
    and linkd, and no host keeps anything of the experiment."""
    machines, backend, agents = cluster
    # Six nodes, two a host: every host holds a part, and each part a shaped link (linkd).
    p = plan(experiment((EXAMPLES / "dumbbell.yaml").read_text(), "i21nolinkd"))
    broken = "h2"
    before = (interfaces(), _host_interfaces(machines))
    agents.kill(broken)
    until(lambda: broken not in backend.hosts(), f"the scheduler to see the agent of {broken} go")
    agents.start(broken, env=unbuilt_checkout(tmp_path) if breakage == "unbuilt" else breakage)
    try:
        until(lambda: backend.hosts() == machines.hosts, f"the agent of {broken} to join")
        assert broken in place(p, backend.facts()).values()
        try:
            backend.swap_in(p)
        except EnvironmentProblem as exc:
            said = str(exc)
        else:
            backend.swap_out(p)
            raise AssertionError(f"host {broken} swapped its part in")
        print(said)
        assert f"swap-in of experiment {p.experiment} failed on host {broken}: " in said
        assert "nestbed-linkd" in said and "\n" not in said
        assert _nothing_of(p, machines, backend) == []
        assert (interfaces(), _host_interfaces(machines)) == before
    finally:
        agents.kill(broken)
        agents.start(broken)
        until(lambda: backend.hosts() == machines.hosts, f"the agent of {broken} to join")


def test_the_six_node_dumbbell_over_three_hosts_reaches_every_host_from_every_other(
    swapped, cluster
):
    _, backend, _ = cluster
    exp = experiment((EXAMPLES / "dumbbell.yaml").read_text(), "i21three")
    p = swapped(plan(exp))
    nodes, underlay = backend.placement(p)
    assert sorted(nodes.values()) == ["h1", "h1", "h2", "h2", "h3", "h3"]
    # Each cut link's sending pipes gave up at most the slowest pair's underlay time.
    slowest_s = max(d for per in underlay.delays_s.values() for d in per.values())
    given_up_ms = 2e3 * slowest_s * len(cut_links(p, nodes))
    for src, dst in (("h1", "h3"), ("h2", "h4"), ("h4", "h1"), ("h3", "h2")):
        ping = backend.exec_in(p, src, ["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", dst],
                               capture_output=True, text=True)  # fmt: skip
        assert ping.returncode == 0, f"{src} -> {dst}: {ping.stdout}{ping.stderr}"
        rtt_min_ms = float(ping.stdout.split(" = ")[1].split("/")[0])
        # 2 x (1 + 20 + 1) ms
        assert 44 - given_up_ms <= rtt_min_ms < 70, f"{src} -> {dst}: {rtt_min_ms} ms"


TWO_NODES = """
nodes: [{name: a}, {name: b}]
links: [{name: ab, members: [a, b], delay: 1ms}]
"""


def _nodes_by_host(backend, plans) -> dict[str, int]:
    held: dict[str, int] = {}
    for p in plans:
        for h in backend.placement(p)[0].values():
            held[h] = held.get(h, 0) + 1
    return held


def test_experiments_side_by_side_share_the_hosts_slots_and_one_that_does_not_fit_says_so(
    swapped, cluster
):
    """Three hosts of two slots: a dumbbell takes four, so a second one does not fit until
    the first is swapped out, and says why in one sentence, leaving nothing; a two-node
    experiment fits beside it on the host left. Before, the second dumbbell was placed on
    the same two hosts as the first, four nodes on a host of two slots."""
    machines, backend, _ = cluster
    first = swapped(plan(experiment(DUMBBELL, "i21slot1")))
    assert sum(f.held for f in backend.facts()) == 4
    second = plan(experiment(DUMBBELL, "i21slot2"))
    with pytest.raises(Held) as caught:
        backend.swap_in(second)
    assert str(caught.value) == (
        f"experiment {second.experiment} does not fit in the slots other experiments leave on "
        "the cluster (4 of its 6 node slots are held): swap one of them out, or try again "
        "when one has ended"
    )
    assert _nothing_of(second, machines, backend) == []
    small = swapped(plan(experiment(TWO_NODES, "i21slot3")))
    (free,) = set(machines.hosts) - set(backend.placement(first)[0].values())
    assert set(backend.placement(small)[0].values()) == {free}
    assert sorted(_nodes_by_host(backend, [first, small]).values()) == [2, 2, 2]
    backend.swap_out(first)
    swapped(second)
    assert max(_nodes_by_host(backend, [second, small]).values()) <= 2


def test_two_swapins_at_once_never_put_more_nodes_on_a_host_than_its_slots(cluster):
    """Two dumbbells swapped in at the same moment, from the same facts: the mapper places
    them alike, so each host's slots are taken by whichever share comes first, the other is
    refused and placed again; one dumbbell ends up swapped in and the other says it does
    not fit, with nothing of it left anywhere."""
    machines, backend, _ = cluster
    plans = [plan(experiment(DUMBBELL, f"i21race{n}")) for n in range(2)]
    outcomes: dict[str, BaseException | None] = {}
    start = threading.Barrier(2)

    def swap_in(p) -> None:
        start.wait()
        try:
            backend.swap_in(p)
            outcomes[p.experiment] = None
        except BaseException as exc:  # the outcome is what the test checks
            outcomes[p.experiment] = exc

    threads = [threading.Thread(target=swap_in, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [p for p in plans if outcomes[p.experiment] is None]
    lost = [p for p in plans if outcomes[p.experiment] is not None]
    try:
        print({name: repr(exc) for name, exc in outcomes.items()})
        assert len(won) == 1 and len(lost) == 1
        assert isinstance(outcomes[lost[0].experiment], Held)
        assert "does not fit in the slots other experiments leave" in str(
            outcomes[lost[0].experiment]
        )
        assert max(_nodes_by_host(backend, won).values()) <= 2
        assert sum(f.held for f in backend.facts()) == 4
        assert _nothing_of(lost[0], machines, backend) == []
    finally:
        for p in won:
            backend.swap_out(p)
    assert sum(f.held for f in backend.facts()) == 0
    for p in plans:
        assert _nothing_of(p, machines, backend) == []


def test_a_long_command_on_a_host_holds_up_no_other_command_there(swapped, cluster, tmp_path):
    """`exec` of a command in h1 that waits for a file, and meanwhile a command started in h1
    (its host's) that writes it and is then stopped by a signal. Before, every command on a
    host took the host's one slot: the second waited for the first to end, which waited
    (here up to 60 s, then failed) for the second."""
    _, backend, _ = cluster
    p = swapped(plan(experiment(DUMBBELL, "i21long")))
    running, flag = tmp_path / "running", tmp_path / "flag"
    wait_for_flag = (
        f"touch {running}; for i in $(seq 600); do [ -e {flag} ] && exit 0; sleep 0.1; done; exit 1"
    )
    done: list[subprocess.CompletedProcess] = []
    waiter = threading.Thread(
        target=lambda: done.append(backend.exec_in(p, "h1", ["sh", "-c", wait_for_flag]))
    )
    waiter.start()
    try:
        until(running.exists, "the exec'd command to run")
        writer = backend.start_in(p, "h1", ["sh", "-c", f"touch {flag}; exec sleep 600"])
        until(flag.exists, "the started command to write the flag")
        writer.send_signal(signal.SIGTERM)
        assert writer.wait() == -signal.SIGTERM
    finally:
        flag.touch()  # however it went, the exec'd command ends
        waiter.join()
    assert done[0].returncode == 0


def test_a_dead_agent_leaves_its_network_running_and_its_successor_swaps_it_out(swapped, cluster):
    """The data plane never goes through Dask, and a host's state lives on the host (its
    namespaces, linkd, state folder), not in its agent: a new agent takes over from it, and
    swap-out meanwhile fails at once for that host only."""
    machines, backend, agents = cluster
    exp = experiment(DUMBBELL, "i21crash")
    p = swapped(plan(exp))
    nodes, _ = backend.placement(p)
    dead = nodes["h3"]
    agents.kill(dead)
    until(lambda: dead not in backend.hosts(), f"the scheduler to see the agent of {dead} gone")
    ping = backend.exec_in(p, "h1", ["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", "h3"],
                           capture_output=True, text=True)  # fmt: skip
    assert ping.returncode == 0, ping.stdout + ping.stderr  # h1's host still answers for h1
    # Swap-out does what it can at once: the other hosts' shares go, the dead host's waits.
    with pytest.raises(
        EnvironmentProblem, match=f"failed on host {dead}: host {dead} has no agent"
    ):
        backend.swap_out(p)
    left = {n for n in namespaces() if n.startswith(f"nb-{p.tag}")}
    assert p.node("h1").netns not in left and p.node("h3").netns in left
    agents.start(dead)
    until(lambda: backend.hosts() == machines.hosts, f"a new agent on {dead} to join")
    assert backend.exec_in(p, "h3", ["true"]).returncode == 0
    # (the fixture's swap-out through the new agent removes the rest, and checks it)


def test_a_host_that_does_not_answer_fails_the_swap_in_at_the_deadline_before_anything_is_made(
    cluster,
):
    _, backend, agents = cluster
    p = plan(experiment(DUMBBELL, "i21mute"))
    frozen = agents.agents["h2"]
    # The deadline must be missed by the frozen host alone: the hosts that answer do so
    # within it. It is ten times the slowest of three facts() round trips measured now, on
    # this machine as loaded as it is (about 0.1 s), and at least 3 s; a deadline the others
    # miss too names the first of them (h1), not h2. (The first call, which connects the
    # client, is not one of them: the deadline starts once the work is submitted.)
    backend.facts()
    round_trips_s = []
    for _ in range(3):
        began = time.monotonic()
        backend.facts()
        round_trips_s.append(time.monotonic() - began)
    timeout_s = max(3, math.ceil(10 * max(round_trips_s)))
    print(f"facts() round trips {[f'{t * 1e3:.0f} ms' for t in round_trips_s]}: "
          f"deadline {timeout_s} s")  # fmt: skip
    impatient = ClusterBackend(
        backend.scheduler, state_root=backend.state_root, timeout_s=timeout_s
    )
    frozen.send_signal(signal.SIGSTOP)  # alive for the scheduler, silent for its work
    try:
        message = f"host h2 did not report its facts: TimeoutError: no answer within {timeout_s} s"
        with impatient, pytest.raises(EnvironmentProblem, match=message):
            impatient.swap_in(p)
    finally:
        frozen.send_signal(signal.SIGCONT)
    assert not [n for n in namespaces() if n.startswith(f"nb-{p.tag}")]
    assert not backend.run_dir(p).exists()
    assert backend.facts()  # the host answers again


def test_an_agent_killed_while_building_its_part_has_its_successor_remove_that_part(cluster):
    """The swap-in fails (the dead host's part could not be removed); the host's next agent
    finds the part its predecessor never finished and removes it before it serves."""
    machines, backend, agents = cluster
    p = plan(experiment(DUMBBELL, "i21half"))
    victim = place(p, backend.facts())["h3"]
    note = machines.run_dir(victim) / BUILDING / p.experiment
    building = p.node("h3").netns
    impatient = ClusterBackend(backend.scheduler, state_root=backend.state_root, timeout_s=20)
    failed: list[EnvironmentProblem] = []

    def swap_in():
        try:
            impatient.swap_in(p)
        except EnvironmentProblem as exc:
            failed.append(exc)

    thread = threading.Thread(target=swap_in)
    thread.start()
    try:
        while building not in namespaces() and thread.is_alive():
            time.sleep(0.005)
        assert note.exists(), "the host finished its part before its agent could be killed"
        agents.kill(victim)  # mid-build
    finally:
        thread.join()
        impatient.close()
    (exc,) = failed
    assert f"failed on host {victim}" in str(exc) and "could not remove its part" in str(exc)
    assert building in namespaces()  # no one could remove it
    agents.start(victim)
    until(lambda: backend.hosts() == machines.hosts, f"a new agent on {victim} to join")
    until(lambda: not [n for n in namespaces() if n.startswith(f"nb-{p.tag}")],
          f"the new agent of {victim} to remove the unfinished part")  # fmt: skip
    assert not note.exists()
    assert not processes(str(machines.run_dir(victim) / p.experiment))
    backend.swap_out(p)  # the controller's placement, kept for a swap-out, goes too
    assert not backend.run_dir(p).exists()


class Hasty(ClusterBackend):
    """A back end that waits 50 ms for each host's part of a swap-in (no host builds its part
    that fast) and 1 ms for its removal (no Dask round trip is that fast): with 50 ms for the
    removal too, a host whose build ended just after the swap-in's deadline removed its part
    in time on a quiet machine, and none was late."""

    def _on_hosts(self, function, args, **options):  # type: ignore[no-untyped-def]
        self.timeout_s = {host_part.swap_in: 0.05, host_part.swap_out: 0.001}.get(function, 300)
        return super()._on_hosts(function, args, **options)


def test_a_host_that_answers_after_the_swap_ins_deadline_removes_its_part_once_built(cluster):
    """Before, the removal sent to a host still building was called off with it, and the
    part it then finished stayed until someone ran `nestbed cleanup NAME`."""
    machines, backend, _ = cluster
    p = plan(experiment(DUMBBELL, "i21late"))
    hasty = Hasty(backend.scheduler, state_root=backend.state_root)
    try:
        with pytest.raises(EnvironmentProblem) as caught:
            hasty.swap_in(p)
    finally:
        hasty.close()
    said = str(caught.value)
    print(said)
    assert "no answer within 0.05 s" in said
    assert "did not answer in time: " in said and "once it has finished building it" in said
    until(lambda: not [n for n in namespaces() if n.startswith(f"nb-{p.tag}")]
              and not any(processes(str(machines.run_dir(h) / p.experiment))
                          for h in machines.hosts),
          "the late hosts to remove their parts")  # fmt: skip
    for h in machines.hosts:
        until(lambda h=h: not (machines.run_dir(h) / p.experiment).exists(),
              f"host {h}'s state of the experiment to go")  # fmt: skip
    assert not backend.run_dir(p).exists()


def test_a_nodes_cpu_time_and_memory_on_another_host_are_read_through_its_agent(swapped, cluster):
    _, backend, _ = cluster
    p = swapped(plan(experiment(DUMBBELL, "i21usage")))
    cgroup = backend.node_cgroup(p, "h3")
    assert cgroup is not None
    before = cgroup.cpu_seconds()
    busy = ["timeout", "0.5", "sh", "-c", "while :; do :; done"]
    backend.exec_in(p, "h3", busy)
    time.sleep(0.1)  # past the reading kept for a sweep over the nodes
    after = cgroup.cpu_seconds()
    print(f"h3 burnt {after - before:.3f} CPU s; memory {cgroup.memory_bytes()} bytes")
    assert after > before  # its busy loop counted, on its host
    assert cgroup.memory_bytes() > 0
    other = backend.node_cgroup(p, "h1")  # another host's node, its own counters
    assert other is not None and other.cpu_seconds() < after


def test_agents_join_a_scheduler_that_restarted_and_keep_their_hosts_parts(swapped, cluster):
    """An agent whose scheduler connection broke (here: the scheduler restarted; in CI once,
    a busy machine) joins again, keeping the host's parts of experiments: before, it ended,
    and the host had no agent until someone started one."""
    machines, backend, agents = cluster
    exp = experiment(DUMBBELL, "i21rejoin")
    p = swapped(plan(exp))
    agents.restart_scheduler()

    def joined() -> bool:
        with contextlib.suppress(Exception):  # the back end's client reconnects meanwhile
            return backend.hosts() == machines.hosts
        return False

    until(joined, "every agent to join the new scheduler")
    assert all(process.poll() is None for process in agents.agents.values())
    assert backend.exec_in(p, "h3", ["true"]).returncode == 0
    # (the fixture's swap-out through the rejoined agents removes everything, and checks it)


def test_a_command_on_another_host_reads_its_stdin_as_it_is_written(swapped, cluster):
    _, backend, _ = cluster
    p = swapped(plan(experiment(DUMBBELL, "i21stdin")))
    command = ["sh", "-c", 'read line; echo "got $line"; exec sha256sum']
    process = backend.start_in(p, "h3", command, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    # A line is answered while the input is still open: it streams, not at the input's end.
    process.stdin.write(b"hello\n")
    process.stdin.flush()
    assert process.stdout.readline() == b"got hello\n"
    # More than a pipe, a round and the host's store hold at once, in order, to its end.
    data = os.urandom(5 * remote.INPUT_BYTES + 12345)
    began = time.monotonic()
    out, err = process.communicate(data, timeout=300)
    took = time.monotonic() - began
    print(f"{len(data)} bytes of input to h3 across the cluster in {took:.2f} s")
    assert process.returncode == 0, err
    assert out.split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_input_to_a_command_on_another_host_that_stops_reading_fails_as_a_pipe_would(
    swapped, cluster
):
    _, backend, _ = cluster
    p = swapped(plan(experiment(DUMBBELL, "i21stdin2")))
    process = backend.start_in(p, "h1", ["head", "-c", "5"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE)  # fmt: skip
    with pytest.raises(BrokenPipeError):  # its host closed the input, then this end closed
        for _ in range(100):
            process.stdin.write(b"x" * remote.INPUT_BYTES)
            process.stdin.flush()
    assert process.wait(timeout=60) == 0
    assert process.stdout.read() == b"xxxxx"
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()


# The dumbbell with its access link on h3's side shaped, so that it is emulated inside one
# host (r2's and h3's) as the bottleneck is emulated across two.
SHAPED_ACCESS = DUMBBELL.replace("{name: access3, members: [r2, h3]}",
                                 "{name: access3, members: [r2, h3], delay: 1ms}")  # fmt: skip
# Timed changes in these tests are due this far ahead: long enough for their hand-over and
# for the tests' looks at the hosts' linkd through the scheduler of a loaded machine.
AHEAD_S = 10.0


def _timed_down(channel, link: str, due: float, outcome: dict) -> threading.Thread:
    """``link`` taken down at ``due`` through the channel, in a thread: its answer (or error)
    in ``outcome[link]``."""

    def down() -> None:
        try:
            outcome[link] = channel.request_at(due, [("down", {"link": link,
                                                                "mode": "blackhole"})])  # fmt: skip
        except Exception as exc:
            outcome[link] = exc

    thread = threading.Thread(target=down, daemon=True)
    thread.start()
    return thread


def _waiting(channel, hosts: list[str]) -> dict[str, int]:
    """How many timed changes each host's linkd holds for their time."""
    found = channel.on_hosts(hosts, "status", {})
    return {h: found[h]["timed_waiting"] for h in hosts}


def test_link_changes_wait_in_their_hosts_linkd_until_their_time_and_take_effect_then(
    swapped, cluster
):
    """A change of a cut link (two hosts) and of a link inside another host are handed to
    each host's linkd with their time, ahead of it, as on one host (linkd's ``at``); the
    time the channel gives back is linkd's answer, when the last host applied it, never
    before its time. Before, each host's agent slept until the time and then sent its linkd
    a plain change: no linkd held anything ahead of it."""
    _, backend, _ = cluster
    p = swapped(plan(experiment(SHAPED_ACCESS, "i21at")))
    nodes, _ = backend.placement(p)
    left, right = nodes["r1"], nodes["r2"]
    assert nodes["h3"] == right != left
    channel = backend.linkd(p)
    due = time.monotonic() + AHEAD_S
    applied: dict[str, object] = {}
    threads = [_timed_down(channel, link, due, applied) for link in ("bottleneck", "access3")]
    # The bottleneck's change waits in both its hosts' linkd, access3's in its host's.
    until(lambda: _waiting(channel, [left, right]) == {left: 1, right: 2},
          "each host's linkd to hold its changes", deadline_s=AHEAD_S)  # fmt: skip
    assert time.monotonic() < due
    for thread in threads:
        thread.join(AHEAD_S + 60)
    print(f"applied after their time: bottleneck {(applied['bottleneck'] - due) * 1e3:+.3f} ms, "  # type: ignore[operator]
          f"access3 {(applied['access3'] - due) * 1e3:+.3f} ms")  # type: ignore[operator]  # fmt: skip
    assert due <= applied["bottleneck"] and due <= applied["access3"]  # type: ignore[operator]
    assert _waiting(channel, [left, right]) == {left: 0, right: 0}
    ping = backend.exec_in(p, "r2", ["ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "h3"],
                           capture_output=True, text=True)  # fmt: skip
    assert ping.returncode != 0 and " 0 received" in ping.stdout, ping.stdout  # access3 is down
    counters = channel.request("counters")["links"]
    assert counters["bottleneck"]["state"] == counters["access3"]["state"] == "blackhole"


def test_a_link_change_whose_host_is_gone_before_its_time_fails_naming_that_host(swapped, cluster):
    """A host whose agent died while its linkd held a change cannot say it applied it: the
    change fails, its error naming that host, once its time and the hop back have passed,
    rather than counting as applied by the hosts that answered."""
    machines, backend, agents = cluster
    p = swapped(plan(experiment(SHAPED_ACCESS, "i21gone")))
    nodes, _ = backend.placement(p)
    left, gone = nodes["r1"], nodes["r2"]
    channel = backend.linkd(p)
    due = time.monotonic() + AHEAD_S
    outcome: dict[str, object] = {}
    thread = _timed_down(channel, "bottleneck", due, outcome)
    until(lambda: _waiting(channel, [left, gone]) == {left: 1, gone: 1},
          "both hosts' linkd to hold the change", deadline_s=AHEAD_S)  # fmt: skip
    agents.kill(gone)
    try:
        thread.join(AHEAD_S + LINK_ANSWER_S + 60)
        failed = outcome["bottleneck"]
        print(f"the change's error: {failed}")
        assert isinstance(failed, EnvironmentProblem)
        assert str(failed).startswith(f"host {gone} did not apply the change: ")
        assert left not in str(failed)
    finally:
        agents.start(gone)
        until(lambda: backend.hosts() == machines.hosts, f"a new agent on {gone} to join")
