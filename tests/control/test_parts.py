"""Parts of the controller on their own: typed requests, the server's replies, the sampler's
one link emulator connection, linktest as a child process."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
from control_helpers import TWO_NODES, wait_for

from nestbed.backend.fake import FakeBackend
from nestbed.control import requests
from nestbed.control.linktests import Linktests
from nestbed.control.sampler import Sampler
from nestbed.control.server import RequestServer
from nestbed.errors import Refused
from nestbed.results.folder import RunFolder


def test_requests_are_parsed_once_into_their_model():
    event = requests.parse('{"op": "event", "object": "cbr0", "verb": "set", '
                           '"args": ["rate_", 5], "after_s": 2}')  # fmt: skip
    assert event == requests.Event(op="event", object="cbr0", verb="set", args=("rate_", "5"),
                                   after_s=2)  # fmt: skip
    assert requests.parse('{"op": "finish"}') == requests.Finish(op="finish")


@pytest.mark.parametrize(
    ("line", "sentence"),
    [
        ("not json", "not one JSON object"),
        ("[1]", "not one JSON object"),
        ('{"verb": "x"}', "has no request None"),
        ('{"op": "ping", "x": 1}', "request ping has no field 'x'"),
        ('{"op": "event", "object": "a"}', "request event lacks its field 'verb'"),
        ('{"op": "event", "object": "a", "verb": "b", "after_s": "soon"}',
         "request event: field 'after_s'"),
        ('{"op": "next_run", "start": {"backend": "fake"}}', "request next_run lacks its field"),
    ],
)  # fmt: skip
def test_a_malformed_request_is_refused_with_one_sentence(line, sentence):
    with pytest.raises(Refused, match=sentence):
        requests.parse(line)


def test_the_server_tells_refusals_from_bugs(tmp_path):
    def handle(line: str) -> dict:
        request = requests.parse(line)
        if isinstance(request, requests.Status):
            return {}["missing"]  # a bug
        return {"pong": True}

    server = RequestServer(tmp_path / "s.sock", handle)
    assert server.reply('{"op": "ping"}') == {"ok": True, "pong": True}
    refused = server.reply('{"op": "dance"}')
    assert refused["user"] is True and "has no request 'dance'" in refused["error"]
    bug = server.reply('{"op": "status"}')
    assert bug == {"ok": False, "error": "internal error: KeyError: 'missing'"}
    server.close()


def test_the_server_answers_many_requests_on_a_connection_until_shutdown(tmp_path):
    from nestbed.backend.sockets import SocketClient

    def handle(line: str) -> dict:
        request = requests.parse(line)
        return {"shutdown": True} if isinstance(request, requests.Shutdown) else {}

    server = RequestServer(tmp_path / "s.sock", handle)
    serving = threading.Thread(target=server.serve)
    serving.start()
    with SocketClient(tmp_path / "s.sock", "the test server", timeout=10) as client:
        for _ in range(5):
            assert client.request("ping") == {"ok": True}
        client.request("shutdown")
    serving.join(10)
    assert not serving.is_alive()


class CountingFake(FakeBackend):
    opened = 0

    def linkd(self, plan):
        CountingFake.opened += 1
        return super().linkd(plan)


def _sampling(tmp_path, name: str, backend: FakeBackend):  # type: ignore[no-untyped-def]
    """TWO_NODES swapped in as NAME on BACKEND, and a sampler of it: (plan, sampler)."""
    from nestbed.backend.plan import plan
    from nestbed.spec import load

    source = tmp_path / f"{name}.yaml"
    source.write_text(TWO_NODES)
    p = plan(load(source, name=name).experiment)
    backend.swap_in(p)
    return p, Sampler(backend, p, RunFolder(tmp_path / "run"), {}, lambda: 0.0, lambda _: "up")


def test_status_polls_reuse_the_samplers_link_emulator_connection(tmp_path):
    backend = CountingFake(tmp_path / "fake")
    p, sampler = _sampling(tmp_path, "i19c-sampler", backend)
    for _ in range(20):
        assert [r["port"] for r in sampler.live()] == ["a", "a", "b", "b"]
    sampler.sample()
    sampler.stop()
    assert CountingFake.opened == 1
    assert len(backend.linkd(p).requests()) == 22  # 20 polls, a sample, the last sample
    backend.swap_out(p)


class FlakyFake(FakeBackend):
    """A fake back end whose link emulator fails the counters requests it is told to."""

    failures: list[str] = []

    def linkd(self, plan):
        inner = super().linkd(plan)
        failures = FlakyFake.failures

        class Flaky:
            def request(self, op, **fields):
                if op == "counters" and failures:
                    raise TimeoutError(failures.pop(0))
                return inner.request(op, **fields)

            def close(self):
                inner.close()

        return Flaky()


def test_a_failed_counters_request_is_asked_again_once_and_a_lasting_failure_says_why(
    tmp_path, capsys
):
    backend = FlakyFake(tmp_path / "fake")
    p, sampler = _sampling(tmp_path, "i21-flaky", backend)
    FlakyFake.failures[:] = ["host h2 did not answer"]
    rows, total, why = sampler.chosen()
    assert (len(rows), total, why) == (4, 4, None)  # the second try, on a new connection
    # The log says why the first try failed, though the second answered.
    assert (
        "TimeoutError: host h2 did not answer; the second try answered" in capsys.readouterr().err
    )
    FlakyFake.failures[:] = ["host h2 did not answer", "host h2 still did not answer"]
    rows, _, why = sampler.chosen()
    assert rows == [] and why == (
        "TimeoutError: host h2 did not answer; then TimeoutError: host h2 still did not answer"
    )
    assert "still did not answer; so none now" in capsys.readouterr().err
    assert sampler.chosen()[2] is None and len(sampler.live()) == 4
    sampler.stop()
    backend.swap_out(p)


class ScriptedLinktests(Linktests):
    """Linktests whose child is a script of the test."""

    script = ""

    def argv(self, level: int) -> list[str]:
        return [sys.executable, "-c", self.script, str(level)]


def test_a_linktest_childs_summary_or_failure_is_recorded(tmp_path):
    tests = ScriptedLinktests("fake", tmp_path, RunFolder(tmp_path))
    tests.script = "import json, sys; print('noise'); print(json.dumps({'pass': 3, 'fail': 0}))"
    assert tests.start(2).startswith("linktest level 2 started")
    tests.script = "import sys; sys.exit('the probe would not start')"
    tests.start(3)
    tests.wait()
    assert sorted(tests.finished(), key=lambda s: s["level"]) == [
        {"level": 2, "pass": 3, "fail": 0},
        {"level": 3, "error": "linktest exited with 1: the probe would not start"},
    ]


def test_linktest_main_tests_the_links_as_the_controller_says_they_are(fake, monkeypatch,
                                                                        capsys):  # fmt: skip
    import nestbed.linktest.__main__ as linktest_main
    from nestbed.linktest import run as linktest_run

    experiment = fake(
        TWO_NODES
        + """
events:
  - {at: 0, object: l0, verb: delay, args: [20ms]}
"""
    )
    start = experiment.launch()
    wait_for(lambda: experiment.client.request("status")["changed_links"], "the link event")
    seen = {}

    def linktest(plan, exp, level, *, down=(), backend=None, progress=None):
        seen.update(plan=plan, exp=exp, level=level, down=set(down), backend=backend)
        return linktest_run.Report(experiment=exp.name, level=level, checks=[])

    monkeypatch.setattr(linktest_run, "linktest", linktest)
    linktest_main.main(["--run-dir", str(experiment.run_dir), "--backend", "fake",
                        "--level", "2", "--results", str(start.results)])  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary == {"pass": 0, "fail": 0, "skip": 0, "level": 2,
                       "folder": str(RunFolder(start.results).linktest)}  # fmt: skip
    assert (Path(summary["folder"]) / "linktest.json").exists()
    [changed] = experiment.client.request("status")["changed_links"]
    [l0] = seen["exp"].links
    assert l0 != experiment.exp.links[0]
    assert l0.model_dump(mode="json") == changed  # as the event left it
    assert seen["plan"] == experiment.plan and seen["level"] == 2 and seen["down"] == set()
    assert seen["backend"].name == "fake"


def test_a_bug_while_ending_a_run_leaves_a_failed_manifest_and_no_waiter_forever(fake, monkeypatch):
    from nestbed.control import run as run_module
    from nestbed.results import manifest

    experiment = fake(TWO_NODES)
    start = experiment.start()
    run = run_module.Run(experiment.backend, start)
    run.start()

    def broken(*_args):
        raise KeyError("flows")

    monkeypatch.setattr(run_module, "collect_traffic", broken)
    with pytest.raises(KeyError):
        run.finish("completed", None)
    said = "the controller failed while ending the run: KeyError: 'flows'"
    assert run.finish("completed", None) == {"outcome": "failed", "reason": said,
                                             "results": str(start.results)}  # fmt: skip
    ended = manifest.read(start.results)
    assert (ended["outcome"], ended["reason"]) == ("failed", said)
    run.retire()


def test_only_a_programs_own_processes_count_as_its_group():
    import os
    import subprocess

    from nestbed.control.programs import _group_alive

    marker = b"\0NESTBED_PROGRAM_DIR=/results/programs/p\0"
    env = {**os.environ, "NESTBED_PROGRAM_DIR": "/results/programs/p"}
    ours = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # its number reused
    try:
        assert _group_alive(ours.pid, marker)
        assert not _group_alive(other.pid, marker)
    finally:
        for process in (ours, other):
            process.kill()
            process.wait()
    assert not _group_alive(ours.pid, marker)


def test_a_group_of_zombies_is_not_alive():
    import os
    import signal
    import subprocess

    from nestbed.control.programs import _group_alive

    marker = b"\0NESTBED_PROGRAM_DIR=/results/programs/z\0"
    env = {**os.environ, "NESTBED_PROGRAM_DIR": "/results/programs/z"}
    dead = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        dead.send_signal(signal.SIGKILL)
        # Not reaped: a zombie still in the group, which a signal to the group still finds.
        os.waitid(os.P_PID, dead.pid, os.WEXITED | os.WNOWAIT)
        os.killpg(dead.pid, 0)
        assert not _group_alive(dead.pid, marker)
    finally:
        dead.wait()


def test_callers_waiting_together_share_one_pass_over_proc_begun_after_they_asked(monkeypatch):
    import threading

    from nestbed.control import programs

    class Counted(threading.Condition):
        """Says each time a caller is about to wait (the lock still its own)."""

        entered = threading.Semaphore(0)

        def wait(self, timeout: float | None = None) -> bool:
            self.entered.release()
            return super().wait(timeout)

    passes = programs._Passes()
    passes.changed = Counted()
    under_way, go_on = threading.Event(), threading.Event()
    calls: list[int] = []

    def one_pass() -> dict[int, list[int]]:
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            under_way.set()
            go_on.wait(60)
        return {len(calls): [1]}

    monkeypatch.setattr(programs, "_live_by_group", one_pass)
    got: dict[str, dict[int, list[int]]] = {}

    def ask(who: str) -> None:
        got[who] = passes.live()

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    assert under_way.wait(60)
    later = [threading.Thread(target=ask, args=(f"later{i}",)) for i in range(5)]
    for thread in later:
        thread.start()
    for _ in later:  # all five wait for the pass under way, which began before they asked
        assert Counted.entered.acquire(timeout=60)
    go_on.set()
    for thread in [first, *later]:
        thread.join(60)
    assert calls == [1, 2]  # the five shared the one pass that began after them
    assert got["first"] == {1: [1]}
    assert all(got[f"later{i}"] == {2: [1]} for i in range(5))


def test_a_pass_that_failed_leaves_the_next_caller_a_pass_of_its_own(monkeypatch):
    from nestbed.control import programs

    passes = programs._Passes()
    outcomes = iter([KeyboardInterrupt(), {7: [7]}])

    def one_pass() -> dict[int, list[int]]:
        outcome = next(outcomes)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(programs, "_live_by_group", one_pass)
    with pytest.raises(KeyboardInterrupt):
        passes.live()
    assert passes.live() == {7: [7]}  # not waiting for ever on the pass that failed


def test_a_pass_over_proc_finds_this_process_and_no_zombie():
    import os
    import signal
    import subprocess

    from nestbed.control.programs import _live_by_group

    dead = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        dead.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, dead.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not reaped
        found = _live_by_group()
        assert os.getpid() in found[os.getpgid(0)]
        assert dead.pid not in found.get(dead.pid, [])
    finally:
        dead.wait()


class _Simulation:
    """nestbed-sim as LinkStates sees it: the links it runs and what it was asked."""

    lead_s = 0.0  # on this machine: changes go at once

    def __init__(self, links: set[str]):
        self.links, self.asked = links, []

    def set_state(self, link: str, state: str, due: float | None = None) -> float:
        self.asked.append(("state", link, state))
        return time.monotonic()

    def shape(self, link, due: float | None = None) -> float:  # type: ignore[no-untyped-def]
        self.asked.append(("shape", link.name, link.ports[0].egress.delay_s))
        return time.monotonic()


def test_the_next_runs_links_start_from_its_configuration_not_the_last_runs_events(tmp_path):
    from nbtest import experiment
    from nestbed.backend.plan import plan
    from nestbed.control.links import LinkStates

    text = TWO_NODES + "  - {name: l1, members: [a, b], delay: 5ms}\n"
    first = experiment(text, "resets")
    backend = FakeBackend(tmp_path)
    p = plan(first)
    backend.swap_in(p)
    simulated = _Simulation({"l1"})
    links = LinkStates(first, p, backend, simulated)  # type: ignore[arg-type]
    links.apply("l0", "delay", ("50ms",))
    links.apply("l1", "down", ())
    linkd = backend.linkd(p)
    before = len(linkd.requests())
    # The next point configures l0 with 20 ms: set from the event's 50, not from the first
    # run's 5; l1 comes up in the simulator.
    following = experiment(text.replace("delay: 5ms}\n  - {name: l1", "delay: 20ms}\n  - {name: l1"),
                           "resets")  # fmt: skip
    done = links.reset(following)
    sets = [r for r in linkd.requests()[before:] if r["op"] == "set"]
    assert {r["params"]["delay"]["delay_ns"] for r in sets if r["direction"] == "egress"} == {
        20_000_000
    }, sets
    assert ("state", "l1", "up") in simulated.asked
    assert [line.split(":")[0] for line in done] == ["l0", "l1"]
    assert links.now()["links"] == {"l0": "up", "l1": "up"}
    assert links.reset(following) == []  # nothing left to undo
    backend.swap_out(p)


def test_the_end_of_a_group_waits_until_what_sigkill_was_sent_to_is_gone(monkeypatch):
    # A process ends when it next runs after SIGKILL, on a busy host a while after it was
    # sent: the run's end once returned at once, and a program's child ignoring SIGTERM
    # was still running when `finish` had answered (seen under load).
    import signal

    from nestbed.control import programs

    alive = iter([True, True, True, True, True, False])  # 2 polls of grace, then 3 more
    sent: list[int] = []
    monkeypatch.setattr(programs, "_group_alive", lambda pgid, marker: next(alive))
    monkeypatch.setattr(programs.os, "killpg", lambda pgid, sig: sent.append(sig))
    monkeypatch.setattr(programs.time, "sleep", lambda s: None)
    clock = iter(range(100))
    monkeypatch.setattr(programs.time, "monotonic", lambda: next(clock) * 0.5)
    programs._end_group(4242, b"m", grace_s=0.5)
    assert sent == [signal.SIGTERM, signal.SIGKILL]
    assert next(alive, "all asked") == "all asked"  # it asked until the group was gone
