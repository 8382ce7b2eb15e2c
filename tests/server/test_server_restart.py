"""A server that stops and starts again forgets nothing: users, tokens, projects and the
audit log stay; an active experiment whose controller lives stays active; one whose
controller died while the server was down is settled (swapped out as failed) at start."""

from __future__ import annotations

import os
import signal
import time

from server_helpers import LINE, wait_for

NET = "/v1/projects/net/experiments"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_restart_keeps_accounts_experiments_and_live_controllers(served, people):
    ada = served.client(people["ada"])
    for name in ("kept", "crashed", "idle"):
        ada.request("POST", NET, {"file_name": f"{name}.yaml", "text": LINE})
    for name in ("kept", "crashed"):
        ada.request("POST", f"{NET}/{name}/swapin")
        assert wait_for(ada, f"{NET}/{name}", "swapin")["state"] == "active"

    assert served.stop() is not None  # SIGTERM, as systemd stops it
    controllers = served.controllers()
    assert set(controllers) == {"net--kept", "net--crashed"}  # they outlive the server
    os.kill(controllers["net--crashed"], signal.SIGKILL)  # one dies while the server is down
    while not _gone(controllers["net--crashed"]):
        time.sleep(0.05)
    served.start()

    ada = served.client(people["ada"])  # the same token still works
    states = {e["name"]: e["state"] for e in ada.request("GET", NET)}
    assert states == {"crashed": "swapped", "idle": "defined", "kept": "active"}
    kept = ada.request("GET", f"{NET}/kept/status")
    assert kept["live"]["experiment"] == "net--kept"  # its controller answers the new server
    crashed = ada.request("GET", f"{NET}/crashed")
    assert [r["outcome"] for r in crashed["runs"]] == ["failed"]
    audit = ada.request("GET", "/v1/projects/net/audit")
    assert [(r["actor"], r["action"], r["experiment"]) for r in audit][-1] == (
        None, "reconcile", "crashed")  # fmt: skip
    assert audit[-1]["outcome"].startswith("settled")
    assert [m["user"] for m in ada.request("GET", "/v1/projects/net")["members"]] == ["ada", "cy"]

    ada.request("POST", f"{NET}/kept/swapout")
    assert wait_for(ada, f"{NET}/kept", "swapout")["state"] == "swapped"
    assert _gone_soon(controllers["net--kept"])


def _gone_soon(pid: int) -> bool:
    for _ in range(600):
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_run_through_the_api_ends_and_a_stopping_server_interrupts_one_keeping_it(served, people):
    ada = served.client(people["ada"])
    for name in ("short", "long"):
        ada.request("POST", NET, {"file_name": f"{name}.yaml", "text": LINE})
    ada.request("POST", f"{NET}/short/run", {"duration_s": 0.5})
    assert wait_for(ada, f"{NET}/short", "run")["state"] == "swapped"
    assert [r["outcome"] for r in ada.request("GET", f"{NET}/short")["runs"]] == ["completed"]

    ada.request("POST", f"{NET}/long/run", {"duration_s": 3600})
    for _ in range(1200):
        if ada.request("GET", f"{NET}/long")["state"] == "active":
            break
        time.sleep(0.05)
    assert ada.request("GET", f"{NET}/long")["state"] == "active"
    served.stop()
    served.start()
    long = served.client(people["ada"]).request("GET", f"{NET}/long")
    assert long["state"] == "swapped"
    assert [r["outcome"] for r in long["runs"]] == ["interrupted (SIGTERM)"]
    assert served.controllers() == {}
