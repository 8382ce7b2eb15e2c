"""Admission in a running server: a swap-in or run the machine has no room for is refused,
naming what it lacks, and audited; room made by a swap-out is room again."""

from __future__ import annotations

import os

import pytest
from server_helpers import wait_for

from nestbed.errors import UserError

NET = "/v1/projects/net/experiments"
CORES = os.cpu_count() or 1  # the server runs on this machine and counts its cores


def _one_node(cores: float) -> str:
    return (
        f"nodes: [{{name: a, cpu: {cores}}}, {{name: b}}]\nlinks: [{{name: l0, members: [a, b]}}]\n"
    )


def test_admission_refuses_what_the_machine_cannot_hold_naming_the_resource(served, people):
    ada = served.client(people["ada"])
    for name, cores in (("huge", CORES * 4), ("most", CORES - 0.5), ("one", 1)):
        ada.request("POST", NET, {"file_name": f"{name}.yaml", "text": _one_node(cores)})
    with pytest.raises(UserError, match="cores") as never:
        ada.request("POST", NET + "/huge/swapin")
    ada.request("POST", NET + "/most/swapin")
    assert wait_for(ada, NET + "/most", "swapin")["state"] == "active"
    with pytest.raises(UserError, match="cores") as short:
        ada.request("POST", NET + "/one/run", {"duration_s": 0.5})
    assert str(short.value) != str(never.value)  # "not now" is not "never"
    assert ada.request("GET", NET + "/one")["state"] == "defined"  # nothing was touched
    ada.request("POST", NET + "/most/swapout")
    wait_for(ada, NET + "/most", "swapout")
    ada.request("POST", NET + "/one/run", {"duration_s": 0.5})  # room now
    assert wait_for(ada, NET + "/one", "run")["state"] == "swapped"
    said = "admission: the link emulator's packet rate and the loopback bandwidth not known"
    assert served.log.read_text().count(said) == 1  # without --hosts: not checked, said once
    audit = [(r["action"], r["experiment"], r["outcome"].split(":")[0])
             for r in ada.request("GET", "/v1/projects/net/audit")]  # fmt: skip
    assert ("swapin", "huge", "refused") in audit and ("run", "one", "refused") in audit
