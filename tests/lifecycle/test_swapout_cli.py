"""`nestbed swapout` without typer (``cli.fastswapout``): which command lines it takes, that
it prints, fails and stops as the typer command does, and what it does not import; and the
plain line printer it uses in place of rich (``plain.say``). Over the fake back end, with
the stand-in controller and the active experiment of ``conftest``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nestbed.backend import CLUSTER_ENV
from nestbed.cli import fastswapout, plain
from nestbed.model.options import RunOptions


@pytest.mark.parametrize(
    "args",
    [["swapout", "line"], ["--db", "x.db", "swapout", "line"], ["--debug", "swapout", "line"],
     ["--db=x.db", "--debug", "swapout", "line"]],
)  # fmt: skip
def test_a_plain_swapout_is_taken_without_typer(args, monkeypatch):
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    assert fastswapout.command(args) is not None


@pytest.mark.parametrize(
    "args",
    [["swapout"], ["swapout", "--help"], ["swapout", "a", "b"], ["swapout", "--", "a"],
     ["swapout", "-x", "a"], ["--db"], ["--version", "swapout", "a"], ["--help", "swapout", "a"],
     ["--cluster", "tcp://h:8786", "swapout", "a"], ["--server", "http://h", "swapout", "a"],
     ["--project", "p", "swapout", "a"], ["swapin", "a"], ["status", "a"], []],
)  # fmt: skip
def test_any_other_command_line_goes_the_normal_way(args, monkeypatch):
    monkeypatch.delenv(plain.SERVER_ENV, raising=False)
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    assert fastswapout.command(args) is None


@pytest.mark.parametrize("variable", [plain.SERVER_ENV, CLUSTER_ENV])
def test_a_server_or_a_cluster_in_the_environment_goes_the_normal_way(variable, monkeypatch):
    monkeypatch.setenv(variable, "x")
    assert fastswapout.command(["swapout", "line"]) is None


def test_the_fast_path_prints_what_the_typer_command_prints(testbed, fake, active, capsys):
    from nestbed.cli import app

    name, db = active
    args = ["--db", db, "swapout", name]
    fast = fastswapout.command(args)
    assert fast is not None
    capsys.readouterr()
    fast()
    quick = capsys.readouterr()
    testbed.swap_in(name, RunOptions(results=fake.state_root / "r"))
    app(args, standalone_mode=False)
    typer_way = capsys.readouterr()
    assert (quick.out, quick.err) == (typer_way.out, typer_way.err)
    assert quick.out.startswith(f"experiment {name} is swapped out; results in ")
    assert testbed.store.get(name).state == "swapped"


# A fresh process runs `main_entry` as the console script does, the controller's answers
# stood in; PRELUDE may change the back end first. It writes down the modules it loaded.
PROCESS = """
import atexit, os, signal, sys
from nestbed.control.client import ControllerClient
ControllerClient.request = lambda self, op, **_: {"ok": True, "outcome": "completed"}
from nestbed.backend.fake import FakeBackend
if os.environ.get("PRELUDE") == "signalled":  # SIGTERM in the middle of the teardown
    real = FakeBackend.swap_out
    def signalled(self, plan):
        os.kill(os.getpid(), signal.SIGTERM)
        real(self, plan)
    FakeBackend.swap_out = signalled
atexit.register(lambda: open(os.environ["MODULES"], "w").write(" ".join(sys.modules)))
sys.argv = ["nestbed", *sys.argv[1:]]
from nestbed.cli import main_entry
main_entry()
"""


def _process(args: list[str], tmp_path: Path, *, typer_way: bool, prelude: str = "") -> tuple:
    """stdout, stderr and exit code of the command line ``args`` in a fresh process, and the
    modules it loaded; ``typer_way``: through the typer app (a cluster's variable, which
    the fake back end chosen ignores, keeps the command off the fast path)."""
    modules = tmp_path / "modules.txt"
    env = dict(os.environ, MODULES=str(modules), PRELUDE=prelude)
    env.pop(CLUSTER_ENV, None)
    if typer_way:
        env[CLUSTER_ENV] = "tcp://nowhere:8786"
    done = subprocess.run([sys.executable, "-c", PROCESS, *args], capture_output=True,
                          text=True, env=env, timeout=60)  # fmt: skip
    return (done.stdout, done.stderr, done.returncode), set(modules.read_text().split())


def test_both_ways_print_fail_and_stop_alike_and_the_fast_one_loads_no_typer(
    testbed, fake, active, tmp_path
):
    name, db = active
    args = ["--db", db, "swapout", name]
    seen = {}
    for prelude in ("", "signalled"):
        for typer_way in (False, True):
            if testbed.store.get(name).state == "swapped":
                testbed.swap_in(name, RunOptions(results=fake.state_root / "r"))
            seen[prelude, typer_way], loaded = _process(args, tmp_path, typer_way=typer_way,
                                                        prelude=prelude)  # fmt: skip
            assert testbed.store.get(name).state == "swapped"
            top = {m.split(".")[0] for m in loaded}
            if typer_way:
                assert "typer" in top  # the test tells the ways apart
            else:
                assert top & {"typer", "click", "pydantic", "sqlalchemy"} == set()
                # Rich prints the stop (red on a terminal); a plain line goes without it.
                assert ("rich" in top) == (prelude == "signalled")
    # An experiment that does not exist, or is not active (swapped now), fails alike too.
    for case, which in (("missing", "nosuch"), ("again", name)):
        for typer_way in (False, True):
            seen[case, typer_way] = _process(["--db", db, "swapout", which], tmp_path,
                                             typer_way=typer_way)[0]  # fmt: skip
    for case in ("", "signalled", "missing", "again"):
        assert seen[case, False] == seen[case, True], case
    assert seen["", False][0].startswith(f"experiment {name} is swapped out; results in ")
    assert seen["", False][1:] == ("", 0)
    assert seen["signalled", False] == ("", "stopped by SIGTERM\n", 143)
    missing = (
        "error: there is no experiment named 'nosuch'; see the experiments with `nestbed list`"
    )
    assert seen["missing", False][1:] == (f"{missing}\n", 2)
    again = f"error: experiment {name} is swapped, not active; nothing to swap out"
    assert seen["again", False] == ("", f"{again}\n", 2)


@pytest.mark.parametrize(
    "text",
    ["experiment a is swapped out; results in /r/a-1", "a [bold]b[/bold] c", "a :smile: b",
     "tab\there", "ünïcode", "bell\x07", "[x]", "trailing  ",
     "experiment a is active: 3 nodes, 2 emulated links (0.85 s); results in /r/a-1",
     "in /r/x:smile:y", "a:thumbs_up-emoji:b", "x: y: z", "::"],
)  # fmt: skip
def test_say_prints_what_rich_prints(text, capsys, monkeypatch):
    monkeypatch.setattr(plain, "_consoles", {})
    plain.say(text)
    ours = capsys.readouterr().out
    plain.out.print(text)  # the console, made now
    assert ours == capsys.readouterr().out


@pytest.mark.parametrize(
    "text",
    ["experiment a is swapped out; results in /r/a-1",
     "experiment a is active: 3 nodes, 2 emulated links (0.85 s); results in /r/a-1"],
)  # fmt: skip
def test_say_loads_no_console_for_plain_text(text, capsys, monkeypatch):
    monkeypatch.setattr(plain, "_consoles", {})
    plain.say(text)
    assert plain._consoles == {}
    assert capsys.readouterr().out == text + "\n"


@pytest.mark.parametrize("variable", ["FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"])
def test_progress_is_rich_s_where_the_environment_may_make_a_terminal(variable, monkeypatch):
    monkeypatch.setattr(plain, "_consoles", {})
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    with plain.progress("working"):
        pass
    assert plain._consoles == {}  # captured stderr is no terminal
    monkeypatch.setenv(variable, "1")
    with plain.progress("working"):
        pass
    assert "err" in plain._consoles
