"""The controller's view of a cluster without root: every host's link emulator as one
channel (requests routed to the hosts concerned, counters merged, a cut link's delay kept
compensated), and a remote command as a Popen whose output arrives in rounds."""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import Future

import pytest
from simulated import DUMBBELL

from nbtest import build
from nestbed.backend.cluster.backend import LINK_ANSWER_S, PLACEMENT, ClusterBackend
from nestbed.backend.cluster.channel import ClusterChannel
from nestbed.backend.cluster.proxy import RemoteProcess, sink_and_reader
from nestbed.backend.cluster.share import TUNNEL_PORT, Underlay, shares
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem

LEFT_RIGHT = {"h1": "left", "r1": "left", "r2": "right", "h3": "right"}
UNDERLAY = Underlay(
    {"left": "10.221.0.1", "right": "10.221.0.2"},
    delays_s={"left": {"right": 0.0005}, "right": {"left": 0.0005}},
)


class Hosts:
    """What each host's linkd was asked, and its canned counters; timed requests say when
    each host applied them (a host ``late_s`` behind the others)."""

    def __init__(self, late_s: float = 0.25):
        self.asked: list[tuple[str, str, dict]] = []
        self.timed: list[tuple[float, dict]] = []
        self.late_s = late_s

    def at(self, asked, due):
        self.timed.append((due, asked))
        return {h: due + (self.late_s if h == "right" else 0.0) for h in asked}

    def __call__(self, hosts, op, fields):
        self.asked += [(h, op, fields) for h in hosts]
        if op != "counters":
            return {h: {"ok": True} for h in hosts}
        node = {"left": "r1", "right": "r2"}
        return {h: {"ok": True, "threads": [{"host": h}], "links": {"bottleneck": {"ports": {
            node[h]: {"egress": {"counters": {"host": h}}}, TUNNEL_PORT: {"egress": {}},
        }}}} for h in hosts}  # fmt: skip


@pytest.fixture
def channel():
    hosts = Hosts()
    parts = shares(plan(build(DUMBBELL)), LEFT_RIGHT, UNDERLAY)
    return ClusterChannel(parts, hosts, hosts.at), hosts


def test_a_port_goes_to_its_host_a_link_to_all_its_hosts(channel):
    ch, hosts = channel
    ch.request("down", link="bottleneck", mode="blackhole")
    ch.request("set", link="bottleneck", port="r2", direction="ingress", params={})
    assert [(h, op) for h, op, _ in hosts.asked] == [("left", "down"), ("right", "down"),
                                                     ("right", "set")]  # fmt: skip


def test_counters_of_every_host_are_merged_without_the_tunnel_ports(channel):
    ch, _ = channel
    counters = ch.request("counters")
    ports = counters["links"]["bottleneck"]["ports"]
    assert {p: v["egress"]["counters"]["host"] for p, v in ports.items()} == {
        "r1": "left",
        "r2": "right",
    }
    # Every host's threads, whose lateness validate reports (it read none across hosts).
    assert counters["threads"] == [{"host": "left"}, {"host": "right"}]


def test_a_new_delay_on_a_cut_links_sending_pipe_stays_compensated(channel):
    ch, hosts = channel
    params = {"delay": {"delay_ns": 50_000_000}, "bandwidth": {"rate_bps": 1}}
    ch.request("set", link="bottleneck", port="r1", direction="egress", params=params)
    (_, _, fields), = hosts.asked  # fmt: skip
    assert fields["params"] == {"delay": {"delay_ns": 49_500_000}, "bandwidth": {"rate_bps": 1}}


def test_a_timed_change_goes_to_each_host_once_with_its_own_requests_and_their_time(channel):
    ch, hosts = channel
    params = {"delay": {"delay_ns": 50_000_000}}
    requests = [("down", {"link": "bottleneck", "mode": "blackhole"}),
                ("set", {"link": "bottleneck", "port": "r1", "direction": "egress",
                         "params": params})]  # fmt: skip
    applied = ch.request_at(123.5, requests)
    (due, asked), = hosts.timed  # fmt: skip
    assert due == 123.5 and not hosts.asked  # one message per host, nothing sent untimed
    assert [op for op, _ in asked["left"]] == ["down", "set"]
    assert [op for op, _ in asked["right"]] == ["down"]
    # The cut link's sending pipe keeps the underlay's time off, as untimed changes do.
    assert asked["left"][1][1]["params"] == {"delay": {"delay_ns": 49_500_000}}
    assert applied == 123.75  # when the last host applied it


def started(pid: int) -> Future:
    done: Future = Future()
    done.set_result(pid)
    return done


class NoPoller:
    def forget(self, process):
        self.forgotten = process


def test_a_remote_commands_output_arrives_in_rounds_into_files_and_pipes(tmp_path):
    out_file = (tmp_path / "out").open("wb")
    out, _ = sink_and_reader(out_file, text=False)
    out_file.close()  # as the controller does once the command started
    err, err_reader = sink_and_reader(subprocess.PIPE, text=True)
    signals = []
    poller = NoPoller()
    process = RemoteProcess(poller, "left", "k1", started(42), ["probe"], (out, err), (None, err_reader),
                            lambda *a: signals.append(a))  # fmt: skip
    process.deliver({"code": None, "out": b"first ", "err": b"warn\n"})
    assert process.poll() is None
    process.terminate()
    assert signals == [("left", "k1", 15, False)] and process.pid == 42
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(0)
    log = tmp_path / "probe.log"
    process.deliver({"code": 0, "out": b"last", "err": b"", "files": {str(log): b"1,2,3"}})
    assert process.wait(0) == 0 and poller.forgotten is process
    assert (tmp_path / "out").read_bytes() == b"first last" and log.read_text() == "1,2,3"
    assert process.communicate(timeout=0) == (None, "warn\n")


def test_a_command_its_host_lost_ends_as_killed_and_says_why(tmp_path):
    err, err_reader = sink_and_reader(subprocess.PIPE, text=True)
    out, _ = sink_and_reader(subprocess.DEVNULL, text=True)
    process = RemoteProcess(NoPoller(), "right", "k2", started(7), ["x"], (out, err), (None, err_reader),
                            lambda *a: None)  # fmt: skip
    process.deliver({"lost": True, "why": "TimeoutError: no answer"})
    assert process.wait(0) == -9
    assert "host right lost this command: TimeoutError: no answer" in err_reader.read()


class Here:
    """A drainer that asks no host (the socket's own side only)."""

    def forget(self, sock):
        pass

    def call(self, *args):
        return None


def test_a_remote_socket_keeps_every_datagram_a_round_brings_and_is_readable_while_it_has_any():
    import select

    from nestbed.backend.cluster.datagrams import RemoteSocket

    sock = RemoteSocket(Here(), "left", "s1")
    sock.setblocking(False)
    assert select.select([sock], [], [], 0)[0] == []
    sock.deliver([b"%d" % i for i in range(500)])  # more than a socket pair's queue holds
    assert select.select([sock], [], [], 0)[0] == [sock]
    got = []
    with pytest.raises(BlockingIOError):
        while True:
            got.append(sock.recv(64))
    assert got == [b"%d" % i for i in range(500)]
    assert select.select([sock], [], [], 0)[0] == []
    assert sock.sendto(b"hello", ("10.1.1.2", 7)) == 5
    (taken,) = sock.take_pending()
    assert taken[:2] == (b"hello", ("10.1.1.2", 7)) and sock.take_pending() == []
    sock.close()
    sock.deliver([b"late"])  # a round that was under way when it closed


def test_a_timed_change_a_host_did_not_apply_names_that_host(channel):
    ch, _ = channel
    ch.at_hosts = lambda asked, due: {"left": due, "right": TimeoutError("no answer within 6 s")}
    with pytest.raises(EnvironmentProblem) as failed:
        ch.request_at(10.0, [("down", {"link": "bottleneck", "mode": "blackhole"})])
    assert str(failed.value) == (
        "host right did not apply the change: TimeoutError: no answer within 6 s"
    )


def test_a_timed_changes_hosts_are_waited_for_until_its_time_and_the_hop_back_only(
    tmp_path, monkeypatch
):
    p = plan(build(DUMBBELL))
    backend = ClusterBackend("tcp://127.0.0.1:1", state_root=tmp_path)
    backend.run_dir(p).mkdir()
    (backend.run_dir(p) / PLACEMENT).write_text(json.dumps({
        "nodes": LEFT_RIGHT, "addresses": UNDERLAY.addresses, "mtu": UNDERLAY.mtu,
        "port": UNDERLAY.port, "delays_s": UNDERLAY.delays_s,
    }))  # fmt: skip
    asked: list[tuple[str, float, dict]] = []

    def on_hosts(function, args, **options):
        asked.append((function.__name__, time.monotonic(), options))
        return {h: 0 for h in args}

    monkeypatch.setattr(backend, "_on_hosts", on_hosts)
    due = time.monotonic() + 0.5
    backend.linkd(p).request_at(due, [("down", {"link": "bottleneck", "mode": "blackhole"})])
    (started, started_at, to_start), (taken, taken_at, to_take) = asked
    # Before, the back end's own deadline (300 s): a run's end waited that long for an
    # agent gone while it held the change.
    assert to_start["light"] and LINK_ANSWER_S < to_start["timeout_s"] <= 0.5 + LINK_ANSWER_S
    # The change starts on its hosts at once and returns, so that it holds none of their
    # Dask slots until its time; its result is taken once its time has come.
    assert (started, taken) == ("start_timed", "timed_result") and started_at < due <= taken_at
    assert to_take["light"] and to_take["timeout_s"] == LINK_ANSWER_S


def test_a_host_that_fails_to_give_counters_is_named_whatever_it_raised():
    """Dask's own errors too (a cancelled task is no OSError): a status or a sample gets
    one nestbed error naming the host, which it reports and may do without."""
    from concurrent.futures import CancelledError

    parts = shares(plan(build(DUMBBELL)), LEFT_RIGHT, UNDERLAY)
    hosts = Hosts()

    def failing(asked, op, fields):
        replies = hosts(asked, op, fields)
        replies["right"] = CancelledError("lost with its worker")
        return replies

    channel = ClusterChannel(parts, failing, hosts.at)
    with pytest.raises(EnvironmentProblem, match=r"^host right: CancelledError: lost with"):
        channel.request("counters")
    # Any other request raises what the host raised, as before.
    with pytest.raises(CancelledError):
        channel.request("up", link="bottleneck")
