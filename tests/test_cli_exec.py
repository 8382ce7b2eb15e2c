"""`nestbed exec`'s fast path: what it reads (the store's state, the file swap-in writes),
when it leaves a command to the normal path, and how little it imports. On real namespaces:
tests/backend/test_exec.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nbtest import build
from nestbed.backend import entry
from nestbed.cli import fastexec
from nestbed.store import State, Store

NAME = f"fastexec-{os.getpid()}"
CGROUP = "/sys/fs/cgroup/cpu/nestbed/nb-x-a"


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """An active experiment NAME in a store of its own, with nodes a and b written down as
    swap-in writes them (a in a cgroup, b in none)."""
    db = tmp_path / "store.db"
    with Store.open(str(db)) as store:
        store.create_experiment(NAME, source_text="", source_format="yaml", source_file=None,
                                ir_json=build("nodes: [{name: a}]").to_json())  # fmt: skip
        store.transition(NAME, State.SWAPPING_IN)
        store.transition(NAME, State.ACTIVE)
    monkeypatch.setenv("NESTBED_DB", str(db))
    monkeypatch.setenv("NESTBED_RUN_DIR", str(tmp_path / "run"))
    for variable in ("NESTBED_SERVER", "NESTBED_CLUSTER", "NESTBED_BACKEND"):
        monkeypatch.delenv(variable, raising=False)
    entry.write(tmp_path / "run" / NAME, {"a": ("nb-x-a", [CGROUP]), "b": ("nb-x-b", [])})
    return db


def test_the_file_swap_in_writes_gives_each_node_its_namespace_and_cgroup(tmp_path):
    entry.write(tmp_path, {"a": ("nb-x-a", [CGROUP]), "b": ("nb-x-b", [])})
    assert entry.command(tmp_path, "a", ["ping", "b"]) == [
        "sh", "-c", f"echo 0 > '{CGROUP}/cgroup.procs' && exec \"$0\" \"$@\"",
        "ip", "netns", "exec", "nb-x-a", "ping", "b",
    ]  # fmt: skip
    assert entry.command(tmp_path, "b", ["true"]) == ["ip", "netns", "exec", "nb-x-b", "true"]
    assert entry.command(tmp_path, "zz", ["true"]) is None
    assert entry.command(tmp_path / "none", "a", ["true"]) is None


def test_a_cgroup_is_joined_whatever_its_path_holds(tmp_path):
    odd = tmp_path / "it's a $dir"
    odd.mkdir()
    joined = entry.joined([str(odd)], ["cat", str(odd / "cgroup.procs")])
    assert subprocess.run(joined, capture_output=True, text=True, check=True).stdout == "0\n"


def test_the_fast_path_enters_an_active_experiments_node(machine):
    expected = entry.argv("nb-x-a", [CGROUP], ["sh", "-c", "exit 7"])
    assert fastexec.command(["exec", NAME, "a", "--", "sh", "-c", "exit 7"]) == expected
    assert fastexec.command(["exec", NAME, "a", "sh", "-c", "exit 7"]) == expected
    assert State.ACTIVE.value == fastexec.ACTIVE


@pytest.mark.parametrize(
    "args",
    [
        ["exec", NAME, "zz", "true"],  # no such node: the normal path says so
        ["exec", NAME, "a", "--"],  # no command
        ["exec", NAME, "a"],
        ["exec", "--help"],
        ["--db", "other.db", "exec", NAME, "a", "true"],  # global options: typer's
        ["exec", f"{NAME}-none", "a", "true"],  # no such experiment
        ["status", NAME],
    ],
)
def test_what_the_fast_path_cannot_decide_goes_the_normal_way(machine, args):
    assert fastexec.command(args) is None


@pytest.mark.parametrize(
    "variable", [("NESTBED_SERVER", "http://x"), ("NESTBED_CLUSTER", "tcp://x:8786"),
                 ("NESTBED_BACKEND", "fake"), ("NESTBED_DB", "postgresql://u@h/db")],
)  # fmt: skip
def test_another_back_end_server_or_store_goes_the_normal_way(machine, monkeypatch, variable):
    monkeypatch.setenv(*variable)
    assert fastexec.command(["exec", NAME, "a", "true"]) is None


def test_an_experiment_that_is_not_active_goes_the_normal_way(machine):
    with Store.open(str(machine)) as store:
        store.transition(NAME, State.SWAPPING_OUT)
    assert fastexec.command(["exec", NAME, "a", "true"]) is None


def test_the_fast_path_loads_neither_the_command_line_nor_the_store_nor_the_plan(machine):
    code = (
        "import sys\nfrom nestbed.cli import fastexec\n"
        f"assert fastexec.command(['exec', {NAME!r}, 'a', 'true'])\n"
        "print(' '.join(sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=os.environ)  # fmt: skip
    loaded = set(done.stdout.split())
    heavy = {"typer", "click", "rich", "pydantic", "nestbed.store.records", "nestbed.errors",
             "nestbed.backend.base", "nestbed.backend.plan", "json", "pathlib", "typing"}  # fmt: skip
    assert loaded & heavy == set()
