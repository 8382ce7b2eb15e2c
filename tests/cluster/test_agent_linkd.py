"""A timed link change runs on the agent's event loop, which also carries the agent's
heartbeats and every answer of its host: a linkd that takes the request and never answers
fails the change, and the loop goes on (before, it was held for good)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from nbtest import build
from nestbed.backend import linux
from nestbed.backend.cluster import agent
from nestbed.backend.plan import plan

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
