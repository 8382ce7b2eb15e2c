"""`nestbed status` without typer (``cli.faststatus``): which command lines it takes, that it
prints what the typer command prints, and what it does not import. Over the fake back end,
with the stand-in controller and the active experiment of ``conftest``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from nestbed.cli import faststatus, plain
from nestbed.control.client import ControllerClient
from nestbed.errors import UserError

STATUS = {
    "ok": True, "experiment": "line", "run_id": 1, "results": "/r", "elapsed_s": 2.5,
    "pending_events": 1, "finished": False, "links": {"link0": "up"},
    "link_counters": [{"link": "link0", "state": "up", "port": "a", "direction": "egress",
                       "packets_out": 7, "drops": 0, "queue_packets": 0}],
    "programs": [{"program": "p", "node": "a", "state": "running", "invocations": 1,
                  "exit_code": None}],
    "flows": [{"flow": "f", "kind": "cbr", "running": True, "starts": 1}],
}  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [["status", "line"], ["status", "--json", "line"], ["status", "line", "--json"],
     ["--db", "x.db", "status", "line"], ["--db=x.db", "--debug", "status", "line"]],
)  # fmt: skip
def test_a_plain_status_is_taken_without_typer(args, monkeypatch):
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    assert faststatus.command(args) is not None


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--help"], ["status", "a", "b"], ["status", "--json", "--json", "a"],
     ["status", "--", "a"], ["status", "-x", "a"], ["--db"], ["--db", "x.db"],
     ["--version", "status", "a"], ["--cluster", "tcp://h:8786", "status", "a"],
     ["--server", "http://h", "status", "a"], ["show", "a"], ["exec", "a", "n", "true"], []],
)  # fmt: skip
def test_any_other_command_line_goes_the_normal_way(args, monkeypatch):
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    assert faststatus.command(args) is None


def test_a_server_in_the_environment_goes_the_normal_way(monkeypatch):
    monkeypatch.setenv(plain.SERVER_ENV, "http://h")
    assert faststatus.command(["status", "line"]) is None


def _printed(capsys, run: Any) -> str:
    capsys.readouterr()
    run()
    return capsys.readouterr().out


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_the_fast_path_prints_what_the_typer_command_prints(active, capsys, monkeypatch, as_json):
    monkeypatch.setattr(ControllerClient, "request", lambda self, op, **_: dict(STATUS))
    monkeypatch.setenv("COLUMNS", "200")
    from nestbed.cli import app

    name, db = active
    args = ["--db", db, "status", name, *as_json]
    fast = faststatus.command(args)
    assert fast is not None
    quick = _printed(capsys, fast)
    typer_way = _printed(capsys, lambda: app(args, standalone_mode=False))
    assert quick == typer_way
    if as_json:
        nodes = json.loads(quick)["nodes"]
        assert [n["node"] for n in nodes] == ["a", "b"] and nodes[0]["namespace"].endswith("-a")
    else:
        assert "link0 │    up │    a │    egress │           7" in quick
        assert quick.startswith("line: run 1 at 2.5 s, 1 events pending; results in /r\n")


def test_the_fast_path_fails_as_the_typer_command_does(testbed, active):
    name, db = active
    testbed.swap_out(name)
    fast = faststatus.command(["--db", db, "status", name])
    assert fast is not None
    with pytest.raises(UserError, match=f"'{name}' is swapped, not active; swap it in first"):
        fast()


def test_status_loads_neither_typer_nor_the_models_nor_sqlalchemy(active):
    name, db = active
    # A fresh process: the stand-in controller's answer, then the command as a user runs it.
    code = (
        "import sys\nfrom nestbed.control.client import ControllerClient\n"
        f"ControllerClient.request = lambda self, op, **_: {STATUS!r}\n"
        f"sys.argv = ['nestbed', '--db', {db!r}, 'status', {name!r}]\n"
        "from nestbed.cli import main_entry\nmain_entry()\n"
        "print(' '.join(sys.modules), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=os.environ, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "link0" in done.stdout
    loaded = {m.split(".")[0] for m in done.stderr.split()}
    assert loaded & {"typer", "click", "pydantic", "sqlalchemy"} == set()
    # Nor what it does not use: nestbed-sim's client, the shared testbed's records, the
    # results' drawing, the threads of swap-out.
    unused = {"nestbed.backend.sim", "nestbed.store.shared_records", "nestbed.results.drawing",
              "concurrent.futures"}  # fmt: skip
    assert unused & set(done.stderr.split()) == set()
