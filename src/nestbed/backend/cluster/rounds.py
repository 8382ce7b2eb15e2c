"""Things kept on hosts for the controlling machine (commands, sockets), asked about in
rounds: each round one Dask task per host about all of that host's things, a pause apart,
while there are any. So the traffic grows with the hosts, not with the things."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol


class Kept(Protocol):
    host: str
    key: str


ROUNDS_KEPT = 50  # the rounds whose time is remembered

# Runs one round: {host: {key: question}} -> {host: its answer, or the exception it raised}.
AskHosts = Callable[[dict[str, dict[str, Any]]], dict[str, Any]]


class Rounds:
    """Asks about every kept thing, ``pause_s`` apart, in a thread that runs while any is
    kept; ``question`` says what to ask of each, ``answered`` takes each host's answer."""

    def __init__(self, name: str, pause_s: float, ask_hosts: AskHosts):
        self.name, self.pause_s, self.ask_hosts = name, pause_s, ask_hosts
        self.lock = threading.RLock()  # ``ready`` may end a thing, which forgets it
        self.kept: dict[str, Kept] = {}
        self.thread: threading.Thread | None = None
        # How long the last rounds took (the hosts' answers through the scheduler).
        self.took_s: collections.deque[float] = collections.deque(maxlen=ROUNDS_KEPT)
        self.began: float | None = None  # when the round going on began

    def slowest_s(self, otherwise: float) -> float:
        """The longest of the last rounds and of the one going on, or ``otherwise`` before
        any."""
        began = self.began
        going = time.monotonic() - began if began is not None else 0.0
        return max(going, max(self.took_s, default=otherwise))

    def question(self, thing: Any) -> Any:
        return None

    def rest(self) -> None:
        """The pause before the next round."""
        time.sleep(self.pause_s)

    def ready(self, thing: Any) -> bool:
        """Whether to ask about ``thing`` this round."""
        return True

    def answered(self, host: str, answer: Any, things: dict[str, Any]) -> None:
        raise NotImplementedError

    def add(self, thing: Kept) -> None:
        with self.lock:
            self.kept[thing.key] = thing
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self.thread.start()

    def forget(self, thing: Kept) -> None:
        with self.lock:
            self.kept.pop(thing.key, None)

    def _loop(self) -> None:
        while True:
            with self.lock:
                if not self.kept:
                    self.thread = None
                    return
                asked: dict[str, dict[str, Any]] = {}
                for key, thing in list(self.kept.items()):
                    if self.ready(thing):
                        asked.setdefault(thing.host, {})[key] = self.question(thing)
                things = dict(self.kept)
            self.began = began = time.monotonic()
            try:
                answers = self.ask_hosts(asked)
            except Exception as exc:  # the scheduler itself did not answer: every host failed
                answers = dict.fromkeys(asked, exc)
            self.took_s.append(time.monotonic() - began)
            self.began = None
            for host, answer in answers.items():
                self.answered(host, answer, {k: things[k] for k in asked[host]})
            self.rest()
