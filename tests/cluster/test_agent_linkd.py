"""A timed link change is handed to the host's linkd at once, with its time (linkd's `at`),
and its answer is linkd's. It runs on the agent's event loop, which also carries the agent's
heartbeats and every answer of its host: a linkd that takes the request and never answers
fails the change, and the loop goes on (before, it was held for good)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from nbtest import build
from nestbed.backend import linux
from nestbed.backend.cluster import agent
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem, InternalError

LINKED = """
nodes: [{name: a}, {name: b}]
links: [{name: l0, members: [a, b], bandwidth: 10Mb, delay: 5ms}]
"""


def test_a_timed_link_change_to_a_linkd_that_does_not_answer_fails_and_frees_the_agents_loop(
    tmp_path, monkeypatch
):
    p = plan(build(LINKED))
    monkeypatch.setattr(linux, "RUN_DIR", tmp_path)
    monkeypatch.setattr(agent, "LINKD_ANSWER_S", 0.2)
    (tmp_path / p.experiment).mkdir()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # takes requests, never answers
    silent.bind(str(tmp_path / p.experiment / "linkd.sock"))
    silent.listen()
    outcome: list[BaseException | int] = []

    def host() -> None:
        async def loop() -> None:
            try:
                outcome.append(await agent.linkd_requests_at(p, time.monotonic_ns(), [
                    ("down", {"link": "l0", "mode": "blackhole"})]))  # fmt: skip
            except Exception as exc:
                outcome.append(exc)

        asyncio.run(loop())

    running = threading.Thread(target=host, daemon=True)
    running.start()
    running.join(60)
    silent.close()
    assert not running.is_alive(), "the agent's loop is still held by linkd"
    (failed,) = outcome
    assert isinstance(failed, TimeoutError)


class FakeLinkd:
    """A linkd socket that answers one request with ``answer`` (given the request), and
    keeps the request and when it arrived (time.monotonic_ns())."""

    def __init__(self, path, answer):
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen()
        self.asked: list[tuple[int, dict]] = []
        self.thread = threading.Thread(target=self._serve, args=(answer,), daemon=True)
        self.thread.start()

    def _serve(self, answer) -> None:
        connection, _ = self.server.accept()
        with connection, connection.makefile("rw") as stream:
            request = json.loads(stream.readline())
            self.asked.append((time.monotonic_ns(), request))
            stream.write(json.dumps(answer(request)) + "\n")
            stream.flush()

    def close(self) -> None:
        self.server.close()


def _hand_over(p, due_ns: int):
    """The agent's timed change of l0 (down) due at ``due_ns``: its result or its error."""

    async def loop():
        return await agent.linkd_requests_at(p, due_ns, [("down", {"link": "l0",
                                                                   "mode": "blackhole"})])  # fmt: skip

    try:
        return asyncio.run(loop())
    except Exception as exc:
        return exc


@pytest.fixture
def linkd_dir(tmp_path, monkeypatch):
    p = plan(build(LINKED))
    monkeypatch.setattr(linux, "RUN_DIR", tmp_path)
    (tmp_path / p.experiment).mkdir()
    return p, tmp_path / p.experiment / "linkd.sock"


def test_a_timed_link_change_goes_to_linkd_at_once_with_its_time_and_comes_back_with_linkds_answer(
    linkd_dir,
):
    """As on one host: linkd's worker applies the change at its time, and the time the event
    took effect is linkd's answer. Before, the agent slept until the time and sent a plain
    ``down``, and its own clock then was the answer."""
    p, path = linkd_dir
    applied_late_ns = 7_654  # linkd's answer, not a clock the agent could read
    linkd = FakeLinkd(path, lambda r: {"ok": True, "at_ns": r["at_ns"],
                                       "applied_ns": r["at_ns"] + applied_late_ns})  # fmt: skip
    due_ns = time.monotonic_ns() + 2_000_000_000
    try:
        applied = _hand_over(p, due_ns)
    finally:
        linkd.close()
    ((arrived_ns, request),) = linkd.asked
    assert request == {"op": "at", "at_ns": due_ns,
                       "requests": [{"op": "down", "link": "l0", "mode": "blackhole"}]}  # fmt: skip
    assert arrived_ns < due_ns  # handed over ahead of its time, not sent at it
    assert applied == due_ns + applied_late_ns


def test_a_timed_link_change_linkd_refuses_fails_with_linkds_reason(linkd_dir):
    p, path = linkd_dir
    refusal = 'at: requests[0]: no link "l0"'
    linkd = FakeLinkd(path, lambda _: {"ok": False, "error": refusal})
    try:
        failed = _hand_over(p, time.monotonic_ns())
    finally:
        linkd.close()
    assert isinstance(failed, InternalError)
    assert str(failed) == f"nestbed-linkd refused at: {refusal}"


def test_a_timed_change_is_started_on_the_agents_loop_and_its_result_taken_later():
    """A Dask task holds one of its worker's slots while it runs, coroutine or not: the
    task that hands a change over returns once it is started, not at its time, and a second
    takes its result then. Before, each change held a slot through its whole lead, and an
    agent's four slots held four changes at most."""

    async def loop() -> tuple[bool, object, BaseException | None]:
        time_comes = asyncio.Event()

        async def change(answer: int) -> int:
            await time_comes.wait()
            return answer

        await agent.start_timed("k1", 0, change, 7)  # returns with the change still waiting
        waiting = not time_comes.is_set()
        time_comes.set()
        result = await agent.timed_result("k1")
        try:
            await agent.timed_result("k1")  # taken once; an agent that restarted has none
        except EnvironmentProblem as exc:
            return waiting, result, exc
        return waiting, result, None

    waiting, result, unknown = asyncio.run(loop())
    assert waiting and result == 7
    assert str(unknown) == (
        "its agent holds no such change (the agent restarted since it was handed over)"
    )
