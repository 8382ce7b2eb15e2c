"""Signals in the life cycle, on the fake back end: SIGTERM ends a run as `interrupted
(SIGTERM)` and swaps it out, a signal during a swap-out waits for its end, and a command that
outlives Live.exec's timeout is killed with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nbtest import experiment
from nestbed.backend.plan import plan
from nestbed.lifecycle import Active, runs, signals
from nestbed.lifecycle.live import Live
from nestbed.model.options import RunOptions
from nestbed.store import State

LINE = """
nodes: [{name: a}, {name: b}]
links: [{name: link0, members: [a, b], delay: 10ms}]
"""


@pytest.fixture(autouse=True)
def own_handlers():
    """Every test leaves the process's signal handlers as it found them."""
    saved = {s: signal.getsignal(s) for s in signals.STOPPING}
    signals.install()
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    signals.carry_on()  # a signal the test raised is sticky until then


def test_a_signal_raises_interrupted_naming_it():
    with pytest.raises(signals.Interrupted) as stop:
        os.kill(os.getpid(), signal.SIGHUP)
        signal.pause()  # never reached: the handler raises first
    assert stop.value.signal_name == "SIGHUP" and stop.value.exit_code == 129
    assert signals.outcome(stop.value) == "interrupted (SIGHUP)"
    assert signals.outcome(KeyboardInterrupt()) == "interrupted (SIGINT)"


def test_a_deferred_signal_arrives_when_the_block_ends():
    finished = False
    with pytest.raises(signals.Interrupted) as stop, signals.deferred():
        with signals.deferred():  # nested: held until the outermost ends
            os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert finished and stop.value.signal_name == "SIGTERM"
    with signals.deferred(deliver=False):
        os.kill(os.getpid(), signal.SIGTERM)  # dropped: the program is stopping anyway


def test_a_signal_ends_a_run_as_interrupted_and_swaps_it_out(testbed, fake, controllers,
                                                             monkeypatch):  # fmt: skip
    exp = experiment(LINE, "sig")
    testbed.define(exp)

    def stopped(*_: object, **__: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()

    monkeypatch.setattr(runs, "wait", stopped)
    with pytest.raises(signals.Interrupted) as stop:
        runs.run(testbed, exp.name, RunOptions(results=fake.state_root / "r"))
    assert stop.value.summary is not None and stop.value.summary["results"]
    finish = [f for op, f in controllers.requests[exp.name] if op == "finish"]
    assert finish[0]["outcome"] == "interrupted (SIGTERM)"
    assert testbed.store.get(exp.name).state == State.SWAPPED
    assert [r.outcome for r in testbed.store.runs(exp.name)] == ["interrupted (SIGTERM)"]
    assert fake.leftovers() == {}


@pytest.mark.parametrize("moment", ["writing the state", "letting the locks go"])
def test_a_signal_at_the_end_of_a_runs_swap_in_still_swaps_it_out(testbed, fake, controllers,
                                                                  monkeypatch, moment):  # fmt: skip
    """The network and controller are up; the signal comes before swap_in has returned."""
    exp = experiment(LINE, "sig3")
    testbed.define(exp)
    if moment == "writing the state":
        store_transition = testbed.store.transition

        def transition(name, state, **kw):  # type: ignore[no-untyped-def]
            store_transition(name, state, **kw)
            if state == State.ACTIVE:
                os.kill(os.getpid(), signal.SIGTERM)

        monkeypatch.setattr(testbed.store, "transition", transition)
    else:
        from nestbed.lifecycle import locks

        release = locks.ExperimentLock.__exit__

        def exit_signalled(self, *exc):  # type: ignore[no-untyped-def]
            release(self, *exc)
            os.kill(os.getpid(), signal.SIGTERM)

        monkeypatch.setattr(locks.ExperimentLock, "__exit__", exit_signalled)
    with pytest.raises(signals.Interrupted) as stop:
        runs.run(testbed, exp.name, RunOptions(results=fake.state_root / "r"))
    assert stop.value.signal_name == "SIGTERM"
    assert testbed.store.get(exp.name).state in (State.SWAPPED, State.FAILED)
    assert [r.outcome for r in testbed.store.runs(exp.name)] == ["interrupted (SIGTERM)"]
    assert fake.leftovers() == {}


def test_a_signal_during_swap_out_waits_for_its_end(testbed, fake, controllers, monkeypatch):
    exp = experiment(LINE, "sig2")
    testbed.define(exp)
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r"))
    tear_down = fake.swap_out

    def signalled_midway(p):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGTERM)
        tear_down(p)

    monkeypatch.setattr(fake, "swap_out", signalled_midway)
    with pytest.raises(signals.Interrupted):
        testbed.swap_out(exp.name)
    assert testbed.store.get(exp.name).state == State.SWAPPED
    assert fake.leftovers() == {}


def test_exec_that_times_out_kills_what_the_command_started(fake, tmp_path: Path):
    exp = experiment(LINE, "exec")
    p = plan(exp)
    fake.swap_in(p)
    try:
        live = Live(Active(exp.name, p, exp, fake))
        pidfile = tmp_path / "child.pid"
        with pytest.raises(subprocess.TimeoutExpired):
            live.exec("a", f"sleep 600 & echo $! > {pidfile}; wait", timeout=5)
        child = int(pidfile.read_text())
        # SIGKILL is delivered, not carried out, by kill(): give the child a moment to die.
        for _ in range(500):
            if not _running(child):
                break
            time.sleep(0.01)
        assert not _running(child)
    finally:
        fake.swap_out(p)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed child waits for its reaper as a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def test_a_stop_passed_on_ends_runs_in_other_threads_as_interrupted(testbed, fake, controllers):
    exp = experiment(LINE, "pooled")
    testbed.define(exp)
    ended: list[BaseException] = []

    def point() -> None:
        try:
            runs.run(testbed, exp.name, RunOptions(results=fake.state_root / "r"))
        except BaseException as exc:
            ended.append(exc)

    signals.stop_everywhere(signal.SIGHUP)  # what a parallel sweep does when it is signalled
    try:
        worker = threading.Thread(target=point)
        worker.start()
        worker.join()
    finally:
        signals.carry_on()
    assert isinstance(ended[0], signals.Interrupted) and ended[0].signal_name == "SIGHUP"
    assert [r.outcome for r in testbed.store.runs(exp.name)] == ["interrupted (SIGHUP)"]
    assert testbed.store.get(exp.name).state == State.SWAPPED
    signals.check()  # carried on: nothing is stopped any more


# Imports in the main thread while signals rain on it, and in another thread at once (a run
# imports its summary's pandas so). The handler sees every signal; it raises only while the
# main thread is in the import loop (``armed``), where the loop catches it.
_IMPORTS_UNDER_SIGNALS = """
import importlib, os, signal, subprocess, sys, threading
from nestbed.lifecycle import signals

folder, count = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, folder)
armed = False

def handler(signum, frame):
    if armed:
        signals._raise(signum, frame)

signal.signal(signal.SIGTERM, handler)
other = threading.Thread(target=lambda: [importlib.import_module(f"m{i}")
                                         for i in reversed(range(count))], daemon=True)
other.start()
rain = subprocess.Popen([sys.executable, "-c", "import os, sys, time\\n"
                         "while True: os.kill(int(sys.argv[1]), 15); time.sleep(0.0005)",
                         str(os.getpid())])
stops, i = 0, 0
while i < count:
    try:
        armed = True
        importlib.import_module(f"m{i}")
        armed = False
        i += 1
    except signals.Interrupted:
        armed = False
        stops += 1
rain.kill()
rain.wait()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
other.join(60)  # a hang's bound, not a measure: the imports take well under a second
print(stops, "hung" if other.is_alive() else "done", flush=True)
os._exit(0)
"""


def test_a_signal_in_the_middle_of_an_import_leaves_other_threads_free_to_import(tmp_path):
    count = 1500
    for i in range(count):
        # Some work in each: the signals land in the modules too, not only in the imports.
        (tmp_path / f"m{i}.py").write_text("X = sum(range(3000))\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", _IMPORTS_UNDER_SIGNALS, str(tmp_path),
                           str(count)], capture_output=True, text=True, timeout=300,
                          env=env)  # fmt: skip
    stops, outcome = done.stdout.split()
    assert int(stops) > 0, "no signal landed during the imports: the test proved nothing"
    assert outcome == "done", f"the other thread's imports hung after {stops} stops"


# A signal handled in the import system's code, then a wait with no end: the stop must still
# come (the retry is a real signal, which interrupts the wait).
_STOP_THEN_WAIT = """
import signal, sys, threading
from nestbed.lifecycle import signals

signals.install()
frame = {}
exec("import sys; frame = sys._getframe()", {"__name__": "importlib._bootstrap"}, frame)
signals._raise(signal.SIGTERM, frame["frame"])  # deferred: no exception here
print("deferred", flush=True)
try:
    threading.Event().wait()
except signals.Interrupted as stop:
    print("stopped", stop.signal_name, flush=True)
"""


def test_a_signal_deferred_in_an_import_still_stops_a_wait_that_follows():
    done = subprocess.run([sys.executable, "-c", _STOP_THEN_WAIT], capture_output=True,
                          text=True, timeout=60)  # a hang's bound: the stop takes 5 ms  # fmt: skip
    assert done.stdout.split() == ["deferred", "stopped", "SIGTERM"], done.stderr
