"""The run's event list: actions due at a time, carried out on time by one worker thread per
object, so events due together on different objects all begin on time and the events of one
object stay in order."""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nestbed.errors import Refused
from nestbed.model import Action

_SPIN_S = 0.002  # the scheduler sleeps until this close to an event, then spins

Perform = Callable[[Action, str, float | None], object]  # action, source, planned_s


@dataclass(order=True)
class Pending:
    """An action waiting for its time."""

    due: float  # time.monotonic()
    seq: int
    action: Action = field(compare=False)
    source: str = field(compare=False)  # static, timeline, dynamic, sequence
    planned_s: float = field(compare=False)  # since the run's t0
    timeline: str | None = field(compare=False, default=None)


class Scheduler:
    """Holds pending actions and hands each to its object's worker when it is due."""

    def __init__(self, perform: Perform):
        self.perform = perform
        self.t0 = time.monotonic()
        self.lock = threading.RLock()
        self.wake = threading.Condition(self.lock)
        self.queue: list[Pending] = []
        self.workers: dict[str, queue.SimpleQueue[Pending | None]] = {}
        self.timelines_pending: dict[str, int] = {}
        self.seq = itertools.count()
        self.ending = False

    def now_s(self) -> float:
        """Seconds since the run's t0."""
        return time.monotonic() - self.t0

    def begin(self) -> None:
        """Sets t0 now and starts handing out what was pushed (relative to it)."""
        with self.wake:
            self.t0 = time.monotonic()
            for item in self.queue:
                item.due = self.t0 + item.planned_s
            heapq.heapify(self.queue)
            for item in self.queue:
                self._worker(item.action.object)  # threads ready before their first event
        threading.Thread(target=self._schedule, name="scheduler", daemon=True).start()

    def push(self, action: Action, source: str, at_s: float, timeline: str | None = None) -> None:
        """Schedules ``action`` at ``at_s`` seconds since t0."""
        with self.wake:
            if self.ending:
                raise Refused("the run has ended; no more events are accepted")
            item = Pending(self.t0 + at_s, next(self.seq), action, source, at_s, timeline)
            heapq.heappush(self.queue, item)
            if timeline:
                self.timelines_pending[timeline] = self.timelines_pending.get(timeline, 0) + 1
            self.wake.notify()

    def upcoming(self) -> list[Pending]:
        """Every pending action, soonest first."""
        with self.lock:
            return sorted(self.queue)

    def wait_timeline(self, name: str) -> None:
        """Returns when every event of timeline ``name`` pushed so far has been carried out."""
        with self.wake:
            self.wake.wait_for(lambda: not self.timelines_pending.get(name))

    def drop_timeline(self, name: str) -> int:
        """Drops the pending events of timeline ``name``; how many."""
        with self.wake:
            kept = [p for p in self.queue if p.timeline != name]
            dropped = len(self.queue) - len(kept)
            self.queue = kept
            heapq.heapify(self.queue)
            self.timelines_pending[name] = 0
            self.wake.notify_all()
        return dropped

    def end(self) -> list[Pending] | None:
        """Stops handing out actions; what was still pending, soonest first (None when the
        scheduler had already ended)."""
        with self.wake:
            if self.ending:
                return None
            self.ending = True
            skipped, self.queue = sorted(self.queue), []
            self.wake.notify_all()
        return skipped

    def retire(self) -> None:
        """Ends the worker threads (the next run of this process has its own)."""
        for items in self.workers.values():
            items.put(None)

    def _schedule(self) -> None:
        while True:
            with self.wake:
                while not self.ending and (
                    not self.queue or self.queue[0].due - time.monotonic() > _SPIN_S
                ):
                    wait = self.queue[0].due - time.monotonic() - _SPIN_S if self.queue else None
                    self.wake.wait(wait)
                if self.ending:
                    return
                item = heapq.heappop(self.queue)
            while time.monotonic() < item.due:
                pass
            self._worker(item.action.object).put(item)

    def _worker(self, obj: str) -> queue.SimpleQueue[Pending | None]:
        # Starting a process takes milliseconds; with a thread per object, events due at the
        # same time on different objects all begin on time.
        with self.lock:
            if obj not in self.workers:
                self.workers[obj] = queue.SimpleQueue()
                threading.Thread(
                    target=self._work, args=(self.workers[obj],), name=f"events-{obj}", daemon=True
                ).start()
            return self.workers[obj]

    def _work(self, items: queue.SimpleQueue[Pending | None]) -> None:
        while True:
            item = items.get()
            if item is None:
                return
            self.perform(item.action, item.source, item.planned_s)
            if item.timeline:
                with self.wake:
                    self.timelines_pending[item.timeline] -= 1
                    self.wake.notify_all()
