"""The batch queue in a running server (a tick every 0.2 s): entries run when they fit,
one at a time when only one fits, in order; one that could never fit is refused; a queued
one can be cancelled; every step is audited."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import pytest
from server_helpers import wait_for

from nestbed.errors import UserError

NET = "/v1/projects/net/experiments"
CORES = os.cpu_count() or 1


def _quota(cores: float, end_s: float) -> str:
    return (f"nodes: [{{name: a, cpu: {cores}}}, {{name: b}}]\n"
            f"links: [{{name: l0, members: [a, b]}}]\n"
            f"events: [{{at: {end_s}, object: l0, verb: down}}]\n")  # fmt: skip


@pytest.fixture
def serve_options() -> tuple[str, ...]:
    return ("--tick-s", "0.2")


def _entries(client) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {e["experiment"]: e for e in client.request("GET", "/v1/projects/net/batch")}


def test_batch_entries_run_when_they_fit_in_turn_and_are_audited(served, people):
    ada = served.client(people["ada"])
    for name, cores, end_s in (("huge", CORES * 4, 1), ("most", CORES - 0.5, 2), ("one", 1, 0.5)):
        ada.request("POST", NET, {"file_name": f"{name}.yaml", "text": _quota(cores, end_s)})
    with pytest.raises(UserError, match="cores"):
        ada.request("POST", NET + "/huge/batch", {})
    ada.request("POST", NET + "/most/batch", {"priority": 5})
    one = served.root / "one.yaml"
    one.write_text(_quota(1, 0.5))
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    queued = served.nestbed("batch", "submit", str(one), **env)
    assert queued.returncode == 0 and "as batch entry" in queued.stdout, queued.stderr
    for _ in range(1200):
        if all(e["state"] == "done" for e in _entries(ada).values()) and len(_entries(ada)) == 2:
            break
        time.sleep(0.1)
    assert {n: (e["state"], e["attempts"]) for n, e in _entries(ada).items()} == {
        "most": ("done", 1), "one": ("done", 1)}  # fmt: skip
    runs = {}
    for name in ("most", "one"):
        found = ada.request("GET", f"{NET}/{name}")
        assert found["state"] == "swapped"
        assert [r["outcome"] for r in found["runs"]] == ["completed"]
        runs[name] = found["runs"][0]
    # "one" cannot fit beside "most": its run began only once "most"'s had ended (and "most"
    # was swapped out). Its entry's end is audited when its operation is over, which may come
    # after the next entry's start: the audit's order is not the machine's.
    assert datetime.fromisoformat(runs["one"]["started_at"]) >= datetime.fromisoformat(
        runs["most"]["ended_at"]
    )
    steps = [(r["action"], r["experiment"]) for r in ada.request("GET", "/v1/projects/net/audit")
             if r["action"].startswith("batch.")]  # fmt: skip
    assert sorted(steps) == sorted([
        ("batch.submit", "huge"), ("batch.submit", "most"), ("batch.submit", "one"),
        ("batch.start", "most"), ("batch.end", "most"), ("batch.start", "one"),
        ("batch.end", "one"),
    ])  # fmt: skip
    assert steps.index(("batch.start", "one")) > steps.index(("batch.start", "most"))
    listed = served.nestbed("batch", "list", **env)
    assert "most done (priority 5, 1 attempts)" in listed.stdout


def test_a_queued_entry_that_does_not_fit_waits_and_can_be_cancelled(served, people):
    ada = served.client(people["ada"])
    for name, cores in (("most", CORES - 0.5), ("one", 1)):
        ada.request("POST", NET, {"file_name": f"{name}.yaml", "text": _quota(cores, 60)})
    ada.request("POST", NET + "/most/swapin")
    assert wait_for(ada, NET + "/most", "swapin")["state"] == "active"
    entry = ada.request("POST", NET + "/one/batch", {})
    time.sleep(1)  # five ticks: it does not fit beside "most", so it stays queued
    assert _entries(ada)["one"]["state"] == "queued"
    assert ada.request("GET", NET + "/one")["state"] == "defined"
    with pytest.raises(UserError, match="already in the batch queue"):
        ada.request("POST", NET + "/one/batch", {})
    cancelled = ada.request("DELETE", f"/v1/projects/net/batch/{entry['id']}")
    assert cancelled["state"] == "cancelled"
    bob = served.client(people["bob"])
    with pytest.raises(UserError, match="there is no project 'net'"):
        bob.request("GET", "/v1/projects/net/batch")
    ada.request("POST", NET + "/most/swapout")
    assert wait_for(ada, NET + "/most", "swapout")["state"] == "swapped"


def test_a_restart_keeps_the_queue_and_retries_the_run_it_cut_short(served, people):
    ada = served.client(people["ada"])
    ada.request("POST", NET, {"file_name": "long.yaml", "text": _quota(0.5, 3600)})
    ada.request("POST", NET + "/long/batch", {})
    for _ in range(600):
        if ada.request("GET", NET + "/long")["state"] == "active":
            break
        time.sleep(0.1)
    assert _entries(ada)["long"]["state"] == "running"
    served.stop()  # the run ends as interrupted, what it measured kept
    served.start()
    for _ in range(600):
        entry = _entries(ada)["long"]
        if entry["state"] != "running":
            break
        time.sleep(0.1)
    assert (entry["state"], entry["attempts"]) == ("queued", 1)
    assert entry["last_failure"] == "the server stopped during its run"
    runs = ada.request("GET", NET + "/long")["runs"]
    assert [r["outcome"] for r in runs] == ["interrupted (SIGTERM)"]
    ada.request("DELETE", f"/v1/projects/net/batch/{entry['id']}")  # not retried for 900 s


def test_a_running_entry_cancelled_is_swapped_out_with_its_results_kept(served, people):
    ada = served.client(people["ada"])
    ada.request("POST", NET, {"file_name": "long.yaml", "text": _quota(0.5, 3600)})
    entry = ada.request("POST", NET + "/long/batch", {})
    for _ in range(600):
        if ada.request("GET", NET + "/long")["state"] == "active":
            break
        time.sleep(0.1)
    assert _entries(ada)["long"]["state"] == "running"
    env = {"NESTBED_SERVER": served.url, "NESTBED_TOKEN": people["ada"]}
    cancelled = served.nestbed("batch", "cancel", str(entry["id"]), **env)
    assert cancelled.returncode == 0 and "long cancelled" in cancelled.stdout, cancelled.stderr
    found = wait_for(ada, NET + "/long", "run", failed=True)  # a cancelled run is no success
    assert found["state"] == "swapped"
    assert "ended cancelled" in found["operation"]["error"]
    runs = ada.request("GET", NET + "/long")["runs"]
    assert [r["outcome"] for r in runs] == ["cancelled"]
    manifest = json.loads((Path(runs[0]["results_dir"]) / "manifest.json").read_text())
    assert manifest["outcome"] == "cancelled"  # its results kept, saying how it ended
    assert _entries(ada)["long"]["state"] == "cancelled"  # not retried
    for _ in range(600):
        ends = [r["outcome"] for r in ada.request("GET", "/v1/projects/net/audit")
                if r["action"] == "batch.end"]  # fmt: skip
        if ends:
            break
        time.sleep(0.1)
    assert ends == [f"cancelled: entry {entry['id']}, its run ended and swapped out, its "
                    "results kept"]  # fmt: skip
    with pytest.raises(UserError, match="is cancelled already"):
        ada.request("DELETE", f"/v1/projects/net/batch/{entry['id']}")


def test_a_projects_priority_limits_bound_its_submissions(served, people):
    ada = served.client(people["ada"])
    ada.request("PATCH", "/v1/projects/net/settings", {"priority_min": -5, "priority_max": 5})
    ada.request("POST", NET, {"file_name": "one.yaml", "text": _quota(0.5, 0.5)})
    with pytest.raises(
        UserError, match=r"batch priority 9 is outside project net's limits \(-5 to 5\)"
    ):
        ada.request("POST", NET + "/one/batch", {"priority": 9})
    assert ada.request("GET", "/v1/projects/net/batch") == []
    assert ada.request("POST", NET + "/one/batch", {"priority": 5})["priority"] == 5
