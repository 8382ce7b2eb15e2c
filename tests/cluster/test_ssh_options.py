"""`nestbed ssh-agents`' hosts and options (``backend.cluster.ssh``), without SSH: how hosts
are named, what is refused in one sentence, and what each host's agent is started with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nestbed.backend.cluster import ssh
from nestbed.errors import UserError


def test_a_host_is_named_by_its_name_or_its_host_names_first_label():
    assert ssh.parse_hosts(["pc1.lab.example.org", "b=10.0.0.2", "c=pc3"]) == (
        ssh.SSHHost("pc1", "pc1.lab.example.org"), ssh.SSHHost("b", "10.0.0.2"),
        ssh.SSHHost("c", "pc3"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["10.0.0.1"], "host 10.0.0.1 is an IP address; name it: NAME=10.0.0.1"),
        (["a.b=pc1"], "host name 'a.b' may hold only letters, digits, '-' and '_'; write NAME=pc1"),
        (["pc1", "pc1.other"], "host name 'pc1' is given twice; name each host once"),
        (["a=pc1;reboot"], "host address 'pc1;reboot' is no host name or IP address"),
        (["a\n=pc1"], "host name 'a\\n' may hold only letters, digits, '-' and '_'; write NAME=pc1"),
        (["a="], "host 'a=' has no address; write NAME=ADDRESS or ADDRESS"),
    ],
)  # fmt: skip
def test_hosts_that_cannot_be_told_apart_or_reached_are_refused(words, message):
    with pytest.raises(UserError) as raised:
        ssh.parse_hosts(words)
    assert str(raised.value) == message


def test_options_refuse_a_python_path_a_shell_would_read_and_missing_key_files(tmp_path):
    hosts = ssh.parse_hosts(["pc1"])
    for path in ("/usr/bin/python3;rm -rf x", "/usr/bin/python3\n", "python3"):
        with pytest.raises(UserError, match=r"--remote-python .* is no absolute path of plain"):
            ssh.SSHOptions(hosts, remote_python=path)
    with pytest.raises(UserError, match=r"--identity .*/none is no file; give an existing one"):
        ssh.SSHOptions(hosts, identity=tmp_path / "none")


def test_each_host_gets_its_own_agent_and_the_scheduler_stays_here(tmp_path: Path):
    key = tmp_path / "id"
    key.write_text("")
    o = ssh.SSHOptions(ssh.parse_hosts(["pc1", "b=10.0.0.2"]), user="lab", port=2200,
                       identity=key, remote_python="/opt/nestbed/bin/python",
                       scheduler_port=0, slots=8, linkd_pps=50000)  # fmt: skip
    scheduler, workers = ssh.cluster_spec(o, "10.0.0.254")
    assert scheduler["options"] == {"host": "10.0.0.254", "port": 0, "dashboard": False}
    assert list(workers) == ["pc1", "b"]
    b = workers["b"]["options"]
    assert b["address"] == "10.0.0.2"
    assert b["worker_class"] == "nestbed.backend.cluster.agent.SSHAgent"
    assert b["remote_python"] == "/opt/nestbed/bin/python"
    assert b["connect_options"]["username"] == "lab" and b["connect_options"]["port"] == 2200
    assert b["connect_options"]["client_keys"] == [str(key)]
    assert b["kwargs"] == {"host": "b", "slots": 8, "nic_bps": 1_000_000_000,
                           "linkd_pps": 50000, "clock_port": 14790}  # fmt: skip
    json.dumps(b["kwargs"])  # they cross to the host as JSON, in Dask's command line
    # A host's measured link emulator is its own.
    _, measured = ssh.cluster_spec(o, "10.0.0.254", measured={"pc1": 250000, "b": None})
    assert measured["pc1"]["options"]["kwargs"]["linkd_pps"] == 250000
    assert measured["b"]["options"]["kwargs"]["linkd_pps"] == 50000
    # The agent class takes them as they are given.
    from nestbed.backend.cluster.agent import SSHAgent

    SSHAgent("tcp://10.0.0.254:1", **b["kwargs"])
