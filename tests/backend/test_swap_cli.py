"""Swapping in and out from the command line, on real namespaces, with a real store."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nestbed.backend.plan import experiment_tag

pytestmark = pytest.mark.root

TOPOLOGY = """
routing: static
nodes: [{name: a}, {name: r}, {name: b}]
links: [{members: [a, r]}, {members: [r, b]}]
"""


@pytest.fixture
def cli(tmp_path):
    db = tmp_path / "store.db"
    made = []

    def run(*args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, NESTBED_DB=str(db), COLUMNS="200")
        return subprocess.run(
            [sys.executable, "-m", "nestbed", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=tmp_path,  # results folders go under results/ of the working directory
        )

    def file(name: str, text: str = TOPOLOGY) -> str:
        path = tmp_path / f"{name}-{os.getpid()}.yaml"
        path.write_text(text)
        made.append(path.stem)
        return str(path)

    run.file = file
    yield run
    for name in made:
        run("swapout", name)


def test_swapin_exec_swapout(cli):
    f = cli.file("life")
    name = f.rsplit("/", 1)[1].removesuffix(".yaml")
    result = cli("swapin", f)
    assert result.returncode == 0, result.stderr
    assert f"experiment {name} is active: 3 nodes" in result.stdout
    assert cli("exec", name, "a", "--", "ping", "-c", "1", "-W", "2", "b").returncode == 0
    assert cli("exec", name, "a", "--", "sh", "-c", "exit 7").returncode == 7
    again = cli("swapin", name)
    assert again.returncode == 2
    assert (
        again.stderr.strip()
        == f"error: experiment '{name}' is active and cannot become swapping-in (from active it can only become swapping-out or failed); swap it out first with `nestbed swapout {name}`"
    )
    missing = cli("exec", name, "zz", "--", "true")
    assert (
        missing.stderr.strip()
        == f"error: experiment '{name}' has no node 'zz'; its nodes are a, r, b"
    )
    assert cli("swapout", name).returncode == 0
    inactive = cli("exec", name, "a", "--", "true")
    assert inactive.returncode == 2 and "not active" in inactive.stderr


def test_cleanup_spares_a_live_experiment_and_all_settles_it_leaving_foreign_objects(cli):
    f = cli.file("crash")
    name = f.rsplit("/", 1)[1].removesuffix(".yaml")
    assert cli("swapin", f).returncode == 0
    foreign_ns, foreign_br = f"foreign-{os.getpid()}", f"fbr{os.getpid()}"[:15]
    subprocess.run(["ip", "netns", "add", foreign_ns], check=True)
    subprocess.run(["ip", "link", "add", foreign_br, "type", "bridge"], check=True)
    try:
        spared = cli("cleanup", name)
        assert spared.returncode == 0, spared.stderr
        assert f"spared {name}: its controller or swap-in is alive" in spared.stdout
        assert '"state": "active"' in cli("show", name, "--json").stdout
        result = cli("cleanup", name, "--all", "--yes")
        assert result.returncode == 0, result.stderr
        assert f"experiment {name} was cleaned up and is swapped out" in result.stdout
        namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert foreign_ns in namespaces and f"-{name.split('-')[0]}" not in namespaces
        assert (
            subprocess.run(["ip", "link", "show", foreign_br], capture_output=True).returncode == 0
        )
        assert '"state": "swapped"' in cli("show", name, "--json").stdout
    finally:
        subprocess.run(["ip", "netns", "delete", foreign_ns], check=False)
        subprocess.run(["ip", "link", "delete", foreign_br], check=False)


def test_a_swap_in_that_fails_leaves_nothing_and_says_why(cli):
    bad = cli.file(
        "bad", TOPOLOGY.replace("{name: a}", "{name: a, sysctls: {net.ipv4.no_such_knob: 1}}")
    )
    name = bad.rsplit("/", 1)[1].removesuffix(".yaml")
    result = cli("swapin", bad)
    assert result.returncode == 3
    assert result.stderr.startswith(
        f"error: swap-in of experiment {name} failed while setting sysctl net.ipv4.no_such_knob=1 on node a:"
    )
    assert result.stderr.strip().endswith("everything it had created was removed")
    assert "Traceback" not in result.stderr
    # Its namespaces carry its tag, not its name: none may be left (the node whose sysctl
    # failed included).
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert experiment_tag(name) not in listed
    assert '"state": "failed"' in cli("show", name, "--json").stdout


def test_capture_writes_a_pcap_per_end_of_the_link_while_traffic_crosses_it(cli, tmp_path):
    """`nestbed capture NAME LINK --duration 1` while a ping crosses the link: one pcap per
    end, each with the pings, and nothing else in the folder; a link that does not exist is
    one sentence naming the experiment's links."""
    import dpkt

    f = cli.file("cap", TOPOLOGY.replace("[{members: [a, r]}", "[{name: ar, members: [a, r]}"))
    name = f.rsplit("/", 1)[1].removesuffix(".yaml")
    assert cli("swapin", f).returncode == 0
    env = dict(os.environ, NESTBED_DB=str(tmp_path / "store.db"))
    ping = [sys.executable, "-m", "nestbed", "exec", name, "a", "--",
            "ping", "-n", "-c", "300", "-i", "0.05", "b"]  # fmt: skip
    pinger = subprocess.Popen(ping, env=env, stdout=subprocess.DEVNULL)
    try:
        said = cli("capture", name, "ar", "--duration", "1", "-o", str(tmp_path / "pcaps"))
    finally:
        pinger.terminate()
        pinger.wait()
    assert said.returncode == 0, said.stderr
    pcaps = sorted((tmp_path / "pcaps").iterdir())
    assert [p.name for p in pcaps] == ["ar-a.pcap", "ar-r.pcap"]
    for pcap in pcaps:
        with pcap.open("rb") as handle:
            count = sum(1 for _ in dpkt.pcap.Reader(handle))
        assert count >= 10, f"{pcap.name}: {count} packets in 1 s of pings every 50 ms"
    wrong = cli("capture", name, "nolink", "--duration", "1")
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == (
        f"error: experiment {name} has no link 'nolink'; its links are ar, link0"
    )
