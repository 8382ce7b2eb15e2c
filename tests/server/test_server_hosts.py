"""Admission with the machine described in a hosts.yaml (`nestbed serve --hosts`): the link
emulator's packet rate is checked, and a refusal names it."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_helpers import Served, wait_for

from nestbed.errors import UserError

NET = "/v1/projects/net/experiments"
PPS = 20_000  # what this machine's link emulator is said to carry


@pytest.fixture
def serve_options(tmp_path: Path) -> tuple[str, ...]:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts: [{{name: this, cores: 64, memory: 64GB, linkd_pps: {PPS}}}]\n")
    return ("--hosts", str(hosts))


def _shaped(bandwidth: str, links: int = 1) -> str:
    return "nodes: [{name: a}, {name: b}]\nlinks:\n" + "".join(
        f"  - {{name: l{i}, members: [a, b], bandwidth: {bandwidth}, delay: 1ms}}\n"
        for i in range(links)
    )


def test_the_link_emulators_packet_rate_is_admitted_and_a_refusal_names_it(served, people):
    ada = served.client(people["ada"])
    # 1500-byte frames both ways: 100 Mb/s is 16 667 packets/s, 40 Mb/s 6 667.
    for name, text in (("fast", _shaped("100Mb")), ("slow", _shaped("40Mb")),
                       ("twice", _shaped("100Mb", links=2))):  # fmt: skip
        ada.request("POST", NET, {"file_name": f"{name}.yaml", "text": text})
    with pytest.raises(UserError, match=r"its link emulator to carry 33 333 packets/s .* the "
                       r"machine has only 20 000 packets/s; give its links lower bandwidths"):  # fmt: skip
        ada.request("POST", NET + "/twice/swapin")
    ada.request("POST", NET + "/fast/swapin")
    assert wait_for(ada, NET + "/fast", "swapin")["state"] == "active"
    with pytest.raises(UserError, match=r"carry 6 667 packets/s .* but 3 333 of the machine's "
                       r"20 000 packets/s are left"):  # fmt: skip
        ada.request("POST", NET + "/slow/swapin")
    ada.request("POST", NET + "/fast/swapout")
    wait_for(ada, NET + "/fast", "swapout")
    log = served.log.read_text()  # what the description does not say, it says once
    assert log.count("admission: the loopback bandwidth not known") == 1
    assert "packet rate not known" not in log


def test_a_hosts_file_that_does_not_describe_this_machine_is_one_sentence(tmp_path: Path):

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts: [{name: elsewhere-1}, {name: elsewhere-2}]\n")
    found = Served(tmp_path).nestbed("serve", "--hosts", str(hosts), "--store",
                                     str(tmp_path / "s.db"))  # fmt: skip
    assert found.returncode == 2  # a user error
    assert "describes elsewhere-1, elsewhere-2, none of them this machine" in found.stderr
