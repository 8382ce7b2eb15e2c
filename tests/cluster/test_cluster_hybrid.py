"""Simulated nodes (``make-simulated``) on a cluster, through the command line: the example
``hybrid.ns`` (two emulated hosts joined across a simulated core) on the simulated hosts,
its nestbed-sim on one host beside one of the emulated nodes and the other's attachment cut
between hosts; traffic of emulated and simulated nodes across, events on the simulated
core from the file and from `nestbed event`, linktest, the simulated part's tables in the
one results folder, and nothing left on any host."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_cluster_lifecycle import Cli, rows

from nbtest import EXAMPLES

pytestmark = pytest.mark.root

# The simulated core goes down for one second of the five the CBR flow runs.
CORE_DOWN = '$ns at 3.0 "$core down"\n$ns at 4.0 "$core up"\n'


@pytest.fixture
def cluster(simulated_cluster):
    from nestbed.binaries import built_binary
    from nestbed.errors import EnvironmentProblem

    try:
        built_binary("nestbed-sim")
    except EnvironmentProblem:
        pytest.skip("nestbed-sim is not built (the hybrid extra): run `make setup`")
    return simulated_cluster


def hybrid(tmp_path: Path, name: str, extra: str = "", *, quiet: bool = False) -> Path:
    """examples/hybrid.ns as NAME, with EXTRA before its `$ns run`, and its attachments 2 ms
    long: a cut link with no delay has the underlay's own time on top, which nothing can
    give up (docs/cluster.md), and linktest's latency check would rightly fail it. ``quiet``:
    without its timed events (no traffic fills the core's queues, no halt)."""
    text = (EXAMPLES / "hybrid.ns").read_text().replace("100Mb 0ms", "100Mb 2ms")
    if quiet:
        text = "".join(line for line in text.splitlines(keepends=True)
                       if not line.startswith("$ns at "))  # fmt: skip
    path = tmp_path / f"{name}.ns"
    path.write_text(text.replace("$ns run", extra + "$ns run"))
    return path


def placed(manifest: dict) -> dict[str, str]:
    """Node -> host, as the run's manifest records it."""
    hosts = manifest["placement"]["hosts"]
    return {node: h for h, facts in hosts.items() for node in facts["nodes"]}


def test_a_hybrid_run_across_hosts_has_its_simulated_traffic_events_lag_and_linktest(
    cluster, tmp_path
):
    machines, agents = cluster
    cli = Cli(machines, agents, tmp_path / "store.db")
    name = f"i21hybrun{os.getpid()}"
    results = tmp_path / "run"
    try:
        cli("run", str(hybrid(tmp_path, name, CORE_DOWN)), "--results", str(results),
            "--linktest", "3")  # fmt: skip
    finally:
        cli.swap_out_if_active(name)
    cli.nothing_left(name)
    manifest = json.loads((results / "manifest.json").read_text())
    nodes = placed(manifest)
    print(f"placed: {nodes}; reason: {manifest.get('reason')}")
    # One simulator, beside one emulated node; the other's attachment crosses hosts.
    assert nodes["r1"] == nodes["r2"] and nodes["h1"] != nodes["h2"]
    assert nodes["r1"] in (nodes["h1"], nodes["h2"])
    flows = {row["flow"]: row for row in rows(results / "traffic" / "flows.csv")}
    for flow, row in flows.items():
        print(f"{flow}: {row}")
    cbr, ftp = flows["cbr0"], flows["ftp1"]
    # CBR h1 -> h2 across the simulated core, down one second of five.
    assert int(cbr["packets_received"]) > 0
    assert 0.1 < float(cbr["loss"]) < 0.35
    assert float(cbr["delay_p50_ms"]) >= 20  # the core's delay
    # TCP from simulated r2 to emulated h1, made in nestbed-sim on its host.
    assert ftp["outcome"] == "ok; simulated: r2 in nestbed-sim", ftp["outcome"]
    assert int(ftp["bytes_received"]) > 0
    events = {(e["object"], e["verb"]): e for e in rows(results / "events.csv")}
    for verb in ("down", "up"):
        # Handed to nestbed-sim's host ahead, sent to nestbed-sim there at its time: never
        # before it (before, it left here at its time and landed a Dask round trip late).
        event = events[("core", verb)]
        print(f"core {verb}: {event['outcome']}, {float(event['error_ms']):+.3f} ms late")
        assert event["outcome"] == "ok"
        assert float(event["actual_s"]) >= float(event["planned_s"])
    # nestbed-sim's lag and its log, from its host, in the one results folder.
    assert rows(results / "simulation" / "lag.csv")
    assert (results / "simulation" / "nestbed-sim.log").exists()
    counters = rows(results / "links" / "counters.csv")
    assert {("core", "r1"), ("core", "r2")} <= {(r["link"], r["port"]) for r in counters}
    report = json.loads((results / "linktest" / "linktest.json").read_text())
    checks = report["checks"]
    failed = [c for c in checks if c["verdict"] == "fail"]
    print(f"linktest: {report['counts']}, failed: {failed}")
    simulated = [c for c in checks if c["verdict"] == "pass"
                 and {"r1", "r2"} & set(c["direction"].replace(">", " ").split())]  # fmt: skip
    assert simulated, "linktest measured no direction with a simulated end"
    assert not failed


def test_a_hybrid_experiment_across_hosts_pings_across_the_simulated_core_and_takes_events(
    cluster, tmp_path
):
    machines, agents = cluster
    cli = Cli(machines, agents, tmp_path / "store.db")
    name = f"i21hybcli{os.getpid()}"
    try:
        cli("swapin", str(hybrid(tmp_path, name, quiet=True)), "--results", str(tmp_path / "run"))
        kept = json.loads(
            (machines.run_dir("controller") / ".cluster" / name / "placement.json").read_text()
        )
        hosts = sorted(set(kept["nodes"].values()))
        assert len(hosts) == 2  # one attachment is cut
        # What the cut attachment's sending pipes gave up for the underlay, both ways.
        given_up_ms = 1e3 * sum(kept["delays_s"][a][b] for a in hosts for b in hosts if a != b)
        ping = cli("exec", name, "h1", "--", "ping", "-n", "-c", "5", "-i", "0.2", "h2")
        before_ms = float(ping.stdout.split(" = ")[1].split("/")[0])
        print(f"ping h1 -> h2 across the simulated core: min RTT {before_ms:.3f} ms (2 x 24 ms, "
              f"{given_up_ms:.3f} ms given up for the underlay)")  # fmt: skip
        assert before_ms >= 2 * (20 + 2 + 2) - given_up_ms  # the core and two attachments
        cli("event", name, "core", "delay", "50ms")
        ping = cli("exec", name, "h1", "--", "ping", "-n", "-c", "5", "-i", "0.2", "h2")
        after_ms = float(ping.stdout.split(" = ")[1].split("/")[0])
        print(f"after `event core delay 50ms`: min RTT {after_ms:.3f} ms (2 x 54 ms)")
        assert after_ms >= 2 * (50 + 2 + 2) - given_up_ms
        assert after_ms - before_ms < 2 * (50 - 20) + 20 / 2
    finally:
        cli("swapout", name, check=False)
    assert cli.state(name) == "swapped"
    cli.nothing_left(name)


# examples/hybrid.yaml with unshaped attachments and no traffic: a cut attachment is a bridge
# on each side, nestbed-sim's end on one host joined to the node's veth on the other.
UNSHAPED = """
routing: static
nodes: [{name: h1}, {name: h2}, {name: r1, simulated: true}, {name: r2, simulated: true}]
links:
  - {name: core, members: [r1, r2], bandwidth: 2Mb, delay: 20ms, simulated: true}
  - {name: attach1, members: [h1, r1], simulated: true}
  - {name: attach2, members: [h2, r2], simulated: true}
"""


def test_unshaped_attachments_across_hosts_are_bridged_to_nestbed_sim(cluster, tmp_path):
    from test_cluster_lifecycle import write

    machines, agents = cluster
    cli = Cli(machines, agents, tmp_path / "store.db")
    name = f"i21hybflat{os.getpid()}"
    try:
        cli("swapin", str(write(tmp_path, name, UNSHAPED)), "--results", str(tmp_path / "run"))
        kept = json.loads(
            (machines.run_dir("controller") / ".cluster" / name / "placement.json").read_text()
        )
        assert len(set(kept["nodes"].values())) == 2  # one attachment is cut
        ping = cli("exec", name, "h1", "--", "ping", "-n", "-c", "5", "-i", "0.2", "h2")
        rtt_ms = float(ping.stdout.split(" = ")[1].split("/")[0])
        # Packets of the inner MTU (a 1422-byte echo: 1450 bytes of IP) cross the bridged
        # tunnel and the simulated routers both ways, unfragmented.
        big = cli("exec", name, "h2", "--", "ping", "-n", "-c", "3", "-i", "0.2", "-s", "1422",
                  "-M", "do", "h1")  # fmt: skip
        print(f"ping h1 -> h2 across unshaped attachments: min RTT {rtt_ms:.3f} ms (2 x 20 ms)")
        assert rtt_ms >= 40
        assert " 0% packet loss" in big.stdout
    finally:
        cli("swapout", name, check=False)
    assert cli.state(name) == "swapped"
    cli.nothing_left(name)
