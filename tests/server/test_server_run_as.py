"""The server's side of confinement on the fake back end (no root needed): each project's
runs carry its own identity down to the back end, a request cannot choose one, and the
results are laid out with the modes that keep projects apart."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import stat

import pytest
from server_helpers import LINE, wait_for

from nestbed.errors import UserError
from nestbed.server.confinement import PROJECT_ID_BASE, project_identity

NET = "/v1/projects/net/experiments"
WEB = "/v1/projects/web/experiments"
WITH_PROGRAM = (
    LINE
    + """\
programs:
  - {name: hello, node: a, command: echo hello}
events:
  - {at: 0, object: hello, verb: start}
"""
)


def _run_both(served, people) -> tuple[dict[str, int], set[tuple[int, int]]]:
    """Runs an experiment with a program in each project; the projects' ids, and whom the
    back end was asked to confine commands as."""
    for who, path in (("ada", NET), ("bob", WEB)):
        client = served.client(people[who])
        client.request("PUT", path + "/one", {"file_name": "one.yaml", "text": WITH_PROGRAM})
        client.request("POST", path + "/one/run", {"duration_s": 1})
        wait_for(client, path + "/one", "run")
    with contextlib.closing(sqlite3.connect(served.db)) as db:
        ids = dict(db.execute("SELECT name, id FROM projects").fetchall())
    journal = [json.loads(line) for line in (served.fake_root / "journal.jsonl").open()]
    return ids, {(j["uid"], j["gid"]) for j in journal if j["op"] == "confine"}


def test_each_projects_runs_are_confined_as_its_own_identity(served, people):
    ids, confined = _run_both(served, people)
    net, web = project_identity(ids["net"]), project_identity(ids["web"])
    assert net.uid == PROJECT_ID_BASE + ids["net"] != web.uid
    assert confined == {(net.uid, net.gid), (web.uid, web.gid)}
    root = served.root / "results"
    assert stat.S_IMODE(root.stat().st_mode) == 0o711
    assert stat.S_IMODE((root / ".portal").stat().st_mode) == 0o700
    for project in ("net", "web"):
        assert stat.S_IMODE((root / project).stat().st_mode) == 0o750
    assert stat.S_IMODE(served.db.stat().st_mode) == 0o600


def test_a_request_cannot_choose_whom_its_programs_run_as(served, people):
    ada = served.client(people["ada"])
    ada.request("PUT", NET + "/one", {"file_name": "one.yaml", "text": LINE})
    for op in ("swapin", "run"):
        with pytest.raises(UserError, match="run_as"):
            ada.request("POST", f"{NET}/one/{op}", {"run_as": {"uid": 1, "gid": 1}})
    assert ada.request("GET", NET + "/one")["state"] == "defined"


@pytest.mark.parametrize("serve_options", [("--trusted-project", "net")])
def test_a_project_the_admin_trusts_runs_its_programs_unconfined(served, people):
    ids, confined = _run_both(served, people)
    web = project_identity(ids["web"])
    assert confined == {(web.uid, web.gid)}  # and none of net's
