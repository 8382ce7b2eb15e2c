"""Idle swap-out by a project's own settings in a running server whose defaults are
Emulab's (a tick every 0.2 s): a project's short idle time swaps its experiments out, a
granted exemption spares one, the owner sees the warning in `list`, and what the idle loop
knows outlives a restart of the server."""

from __future__ import annotations

import time

import pytest
from server_helpers import LINE, wait_for

NET = "/v1/projects/net/experiments"
POLLS = 1200  # 0.1 s apart


@pytest.fixture
def serve_options() -> tuple[str, ...]:
    return ("--tick-s", "0.2")


def _swap_in(client, name: str) -> None:  # type: ignore[no-untyped-def]
    if name not in [e["name"] for e in client.request("GET", NET)]:
        client.request("POST", NET, {"file_name": f"{name}.yaml", "text": LINE})
    client.request("POST", f"{NET}/{name}/swapin")
    assert wait_for(client, f"{NET}/{name}", "swapin")["state"] == "active"


def _warnings(client, name: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [r for r in client.request("GET", "/v1/projects/net/audit")
            if r["action"] == "idle.warn" and r["experiment"] == name]  # fmt: skip


def test_a_projects_idle_time_swaps_out_and_a_granted_exemption_spares(served, people):
    ada, cy = served.client(people["ada"]), served.client(people["cy"])
    ada.request("PATCH", "/v1/projects/net/settings", {"idle_s": 1, "warn_before_s": 0.5})
    ada.request("POST", NET, {"file_name": "spared.yaml", "text": LINE})
    asked = cy.request("POST", NET + "/spared/exemption", {"reason": "a long capture"})
    ada.request("POST", f"/v1/projects/net/exemptions/{asked['id']}/grant")
    _swap_in(ada, "spared")  # first: idle at least as long as the other
    _swap_in(ada, "idle")
    for _ in range(POLLS):
        if ada.request("GET", NET + "/idle")["state"] == "swapped":
            break
        time.sleep(0.1)
    assert ada.request("GET", NET + "/idle")["state"] == "swapped"
    assert ada.request("GET", NET + "/spared")["state"] == "active"
    assert _warnings(ada, "spared") == [] and len(_warnings(ada, "idle")) == 1


def test_the_owner_sees_the_warning_and_a_restart_keeps_the_idle_time(served, people):
    ada = served.client(people["ada"])
    # Warned after 1 s idle, swapped out after 60 s: the restart falls in between.
    ada.request("PATCH", "/v1/projects/net/settings", {"idle_s": 60, "warn_before_s": 59})
    _swap_in(ada, "line")
    for _ in range(POLLS):
        if _warnings(ada, "line"):
            break
        time.sleep(0.1)
    served.stop()
    served.start()
    assert ada.request("GET", NET + "/line")["state"] == "active"  # spared by the restart
    warning = _warnings(ada, "line")[0]["outcome"]
    assert warning.startswith("experiment line: idle for ")
    listed = ada.request("GET", NET)
    assert [(e["name"], e["warning"]) for e in listed] == [("line", warning)]
    assert ada.request("GET", NET + "/line/status")["warning"] == warning
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    shown = served.nestbed("list", **env)
    assert shown.returncode == 0 and f"warning: {warning}" in shown.stdout, shown.stderr
    for _ in range(POLLS):
        if ada.request("GET", NET + "/line")["state"] == "swapped":
            break
        time.sleep(0.1)
    # Swapped out on the idle time counted before the restart: not warned a second time,
    # as a server that had forgotten would have done a second after it started again.
    actions = [r["action"] for r in ada.request("GET", "/v1/projects/net/audit")
               if r["experiment"] == "line" and r["action"].startswith("idle.")]  # fmt: skip
    assert actions == ["idle.warn", "idle.swapout"]
    assert ada.request("GET", NET + "/line")["warning"] is None  # swapped out: nothing pending
