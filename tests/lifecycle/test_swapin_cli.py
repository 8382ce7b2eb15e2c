"""`nestbed swapin` without typer (``cli.fastswapin``): which command lines it takes, that it
prints, fails and stops as the typer command does, and what it does not import. Over the
fake back end, with the stand-in controller and the experiment of ``conftest`` (swapped out
first)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nestbed.backend import CLUSTER_ENV
from nestbed.cli import fastswapin, plain


@pytest.mark.parametrize(
    "args",
    [["swapin", "line"], ["--db", "x.db", "swapin", "line"], ["--debug", "swapin", "line"],
     ["--db=x.db", "--debug", "swapin", "line"]],
)  # fmt: skip
def test_a_plain_swapin_of_a_stored_experiment_is_taken_without_typer(args, monkeypatch):
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    assert fastswapin.command(args) is not None


@pytest.mark.parametrize(
    "args",
    [["swapin"], ["swapin", "--help"], ["swapin", "a", "b"], ["swapin", "--", "a"],
     ["swapin", "--linktest", "2", "a"], ["swapin", "a", "--capture"], ["--db"],
     ["--help", "swapin", "a"], ["--cluster", "tcp://h:8786", "swapin", "a"],
     ["--server", "http://h", "swapin", "a"], ["--project", "p", "swapin", "a"],
     ["swapout", "a"], ["run", "a"], []],
)  # fmt: skip
def test_any_other_command_line_goes_the_normal_way(args, monkeypatch):
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    assert fastswapin.command(args) is None


def test_an_experiment_file_goes_the_normal_way(tmp_path, monkeypatch):
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    path = tmp_path / "line.yaml"
    path.write_text("nodes: [{name: a}]\n")
    assert fastswapin.command(["swapin", str(path)]) is None
    # a name with a dot that is no file is a stored experiment's
    assert fastswapin.command(["swapin", str(tmp_path / "nosuch.yaml")]) is not None


@pytest.mark.parametrize("variable", [plain.SERVER_ENV, CLUSTER_ENV])
def test_a_server_or_a_cluster_in_the_environment_goes_the_normal_way(variable, monkeypatch):
    monkeypatch.setenv(variable, "x")
    assert fastswapin.command(["swapin", "line"]) is None


# A fresh process runs `main_entry` as the console script does, the controller stood in;
# PRELUDE may change the back end first. It writes down the modules it loaded.
PROCESS = """
import atexit, os, signal, sys
from nestbed.control.client import ControllerClient
ControllerClient.launch = lambda self, start, *, pass_fds=(): None
ControllerClient.prestart = lambda self, **_: None
ControllerClient.request = lambda self, op, **_: {"ok": True}
from nestbed.backend.fake import FakeBackend
if os.environ.get("PRELUDE") == "signalled":  # SIGTERM in the middle of the build
    real = FakeBackend.swap_in
    def signalled(self, plan, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(self, plan, *args, **kwargs)
    FakeBackend.swap_in = signalled
atexit.register(lambda: open(os.environ["MODULES"], "w").write(" ".join(sys.modules)))
sys.argv = ["nestbed", *sys.argv[1:]]
from nestbed.cli import main_entry
main_entry()
"""


def _process(args: list[str], tmp_path: Path, *, typer_way: bool, prelude: str = "") -> tuple:
    """stdout, stderr and exit code of the command line ``args`` in a fresh process (in
    ``tmp_path``, where results go), and the modules it loaded; ``typer_way``: through the
    typer app (a cluster's variable, which the fake back end chosen ignores, keeps the
    command off the fast path)."""
    modules = tmp_path / "modules.txt"
    env = dict(os.environ, MODULES=str(modules), PRELUDE=prelude)
    env.pop(CLUSTER_ENV, None)
    if typer_way:
        env[CLUSTER_ENV] = "tcp://nowhere:8786"
    done = subprocess.run([sys.executable, "-c", PROCESS, *args], capture_output=True,
                          text=True, env=env, timeout=60, cwd=tmp_path)  # fmt: skip
    return (done.stdout, done.stderr, done.returncode), set(modules.read_text().split())


def _timeless(seen: tuple[str, str, int]) -> tuple[str, str, int]:
    """What a swap-in printed, its time and its results folder's time stamp left out."""
    out = re.sub(r"\(\d+\.\d\d s\)", "(T s)", seen[0])
    return re.sub(r"-\d{8}-\d{6}", "-STAMP", out), seen[1], seen[2]


def test_both_ways_print_fail_and_stop_alike_and_the_fast_one_loads_no_typer(
    testbed, active, tmp_path
):
    name, db = active
    testbed.swap_out(name)
    args = ["--db", db, "swapin", name]
    seen = {}
    for prelude in ("", "signalled"):
        for typer_way in (False, True):
            got, loaded = _process(args, tmp_path, typer_way=typer_way, prelude=prelude)
            seen[prelude, typer_way] = _timeless(got)
            top = {m.split(".")[0] for m in loaded}
            if typer_way:
                assert "typer" in top  # the test tells the ways apart
            else:
                assert top & {"typer", "click", "sqlalchemy"} == set()
                # Rich prints the stop (red on a terminal); the plain line goes without it.
                assert ("rich" in top) == (prelude == "signalled")
            # A stop rolls the swap-in back: nothing built, the experiment failed.
            state = testbed.store.get(name).state
            assert state == ("failed" if prelude else "active"), got
            seen[prelude, typer_way] += (state,)
            testbed.swap_out(name)  # a failed experiment is cleaned up by a swap-out too
    # An experiment that does not exist, or is already active, fails alike too.
    testbed.swap_in(name)
    for case, which in (("missing", "nosuch"), ("again", name)):
        for typer_way in (False, True):
            seen[case, typer_way] = _process(["--db", db, "swapin", which], tmp_path,
                                             typer_way=typer_way)[0]  # fmt: skip
    for case in ("", "signalled", "missing", "again"):
        assert seen[case, False] == seen[case, True], case
    out, error, code, _ = seen["", False]
    assert out.startswith(f"experiment {name} is active: 2 nodes, 1 emulated links (T s); ")
    assert f"results in {tmp_path / 'results' / name}-STAMP" in out
    assert (error, code) == ("", 0)
    assert seen["signalled", False][1:] == ("stopped by SIGTERM\n", 143, "failed")
    missing = (
        "error: there is no experiment named 'nosuch'; see the experiments with `nestbed list`"
    )
    assert seen["missing", False] == ("", f"{missing}\n", 2)
    assert seen["again", False][0] == "" and seen["again", False][2] == 2
    assert seen["again", False][1].startswith(f"error: experiment '{name}' is active and ")


def test_the_typer_command_still_defines_a_file_first(testbed, active, tmp_path, monkeypatch):
    from nestbed.cli import app

    name, db = active
    testbed.swap_out(name)
    path = tmp_path / "other.yaml"
    path.write_text("nodes: [{name: x}, {name: y}]\nlinks: [{members: [x, y], delay: 1ms}]\n")
    monkeypatch.chdir(tmp_path)
    app(["--db", db, "swapin", str(path)], standalone_mode=False)
    assert testbed.store.get("other").state == "active"
