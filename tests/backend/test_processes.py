"""Stopping a daemon waits on its exit through a pidfd: no sleeping in a loop, and a zombie
nobody reaps counts as gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nestbed.backend import processes


@pytest.fixture
def no_sleeping(monkeypatch):
    def refuse(_s: float) -> None:
        raise AssertionError("time.sleep called while waiting for a process")

    monkeypatch.setattr(time, "sleep", refuse)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_process_that_ends_on_sigterm_is_stopped_without_polling(no_sleeping):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert processes.stop(child.pid, grace_s=30) is True
    assert _gone(child.pid)  # reaped: our own child


def test_a_process_that_ignores_sigterm_is_killed_after_its_grace(no_sleeping):
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline()  # SIGTERM is ignored now
    assert processes.stop(child.pid, grace_s=0.2) is False
    assert _gone(child.pid)


def test_a_zombie_counts_as_gone_and_a_missing_process_is_no_error(no_sleeping):
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    os.kill(child.pid, 0)  # still findable, as an unreaped daemon is
    assert processes.stop(child.pid) is True
    assert _gone(child.pid)
    assert processes.stop(child.pid) is True  # nothing there any more
