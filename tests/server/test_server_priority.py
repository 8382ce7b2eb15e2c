"""The server's threads run ahead of what it starts: every thread of the server 5 nice steps
ahead of the priority it was started with, the controller of an experiment it swapped in
at that priority."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from server_helpers import LINE, People, Served, wait_for

EXP = "/v1/projects/net/experiments/line"


def _nice(task: Path) -> int:
    """A task's nice, from its /proc stat (the 19th field)."""
    return int(task.read_text().rsplit(")", 1)[1].split()[16])


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may put a process ahead")
def test_the_servers_threads_run_ahead_of_its_experiments(served: Served, people: People) -> None:
    assert served.process is not None
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the server inherits the test's
    ada = served.client(people["ada"])
    ada.request("PUT", EXP, {"file_name": "line.yaml", "text": LINE})
    ada.request("POST", EXP + "/swapin")
    wait_for(ada, EXP, "swapin")
    threads = list(Path(f"/proc/{served.process.pid}/task").glob("*/stat"))
    assert len(threads) > 2
    assert {_nice(t) for t in threads} == {base - 5}
    controller = served.controllers()["net--line"]
    assert _nice(Path(f"/proc/{controller}/stat")) == base
    ada.request("POST", EXP + "/swapout")
    wait_for(ada, EXP, "swapout")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may put a thread ahead")
def test_a_block_behind_starts_its_processes_at_the_starting_priority(monkeypatch) -> None:
    from nestbed.server import priority

    monkeypatch.setattr(priority, "_base", None)
    monkeypatch.delenv(priority.ENV_VAR, raising=False)
    seen: dict[str, int] = {}

    def in_a_thread() -> None:  # a thread of its own: the test's keeps its priority
        base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert priority.serve_ahead()
        seen["ahead"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) - base
        with priority.behind():
            child = subprocess.run(["nice"], capture_output=True, text=True, check=True)
        seen["child"] = int(child.stdout) - base
        seen["after"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) - base

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == {"ahead": -5, "child": 0, "after": -5}


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may put a thread ahead")
def test_what_a_request_does_with_an_active_experiment_runs_behind(monkeypatch, tmp_path) -> None:
    """A process a request starts in a node (an exec, a shell) is the experiment's."""
    from types import SimpleNamespace

    from nestbed.server import priority
    from nestbed.server.actives import Actives

    monkeypatch.setattr(priority, "_base", None)
    monkeypatch.delenv(priority.ENV_VAR, raising=False)
    testbed = SimpleNamespace(backend=SimpleNamespace(state_root=tmp_path),
                              active=lambda _stored: SimpleNamespace(close=lambda: None))  # fmt: skip
    seen: dict[str, int] = {}

    def in_a_thread() -> None:
        base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert priority.serve_ahead()
        with Actives().of(testbed, "net--line"):  # type: ignore[arg-type]
            seen["inside"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) - base
        seen["after"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) - base

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == {"inside": 0, "after": -5}
