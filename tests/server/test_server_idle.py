"""Idle swap-out in a running server (idle after 1 s, warned 0.5 s before, a tick every
0.2 s): an idle experiment is warned, then swapped out by the server itself, its run kept,
every step in the audit log."""

from __future__ import annotations

import pytest
from server_helpers import LINE, wait_for

NET = "/v1/projects/net/experiments"


@pytest.fixture
def serve_options() -> tuple[str, ...]:
    return ("--idle-s", "1", "--idle-warn-s", "0.5", "--tick-s", "0.2")


def test_an_idle_experiment_is_warned_then_swapped_out_by_the_server(served, people):
    ada = served.client(people["ada"])
    ada.request("POST", NET, {"file_name": "line.yaml", "text": LINE})
    ada.request("POST", NET + "/line/swapin")
    assert wait_for(ada, NET + "/line", "swapin")["state"] == "active"
    # The server's own swap-out, seen ended once it is audited (its state is stored before).
    wait_for(ada, NET + "/line", "swapout")
    found = ada.request("GET", NET + "/line")
    assert found["state"] == "swapped" and [r["outcome"] for r in found["runs"]] == ["completed"]
    rows = [(r["actor"], r["action"]) for r in ada.request("GET", "/v1/projects/net/audit")]
    assert rows[-3:] == [(None, "idle.warn"), (None, "idle.swapout"), (None, "swapout.end")]
    # The owner sees the warning and the swap-out in the experiment's status, and the CLI too.
    notices = ada.request("GET", NET + "/line/status")["notices"]
    assert [n["action"] for n in notices] == ["idle.warn", "idle.swapout", "swapout.end"]
    assert notices[1]["outcome"].startswith("experiment line: idle for")
    shown = served.nestbed("status", "line", NESTBED_SERVER=served.url, NESTBED_TOKEN=people["ada"])
    assert shown.returncode == 0 and " idle.warn: experiment line: idle for " in shown.stdout
