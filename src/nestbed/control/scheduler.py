"""The run's event list: actions due at a time, carried out on time by one worker thread per
object, so events due together on different objects all begin on time and the events of one
object stay in order.

An action on an emulated link (to this machine's nestbed-linkd, or a cluster's hosts a hop
away), or a program's start (nestbed-spawn's, ``Run.lead_s``), is handed to its own thread
``lead_s`` ahead of its time, with the time it is due, and takes effect there then: the
hop's own delay (a Dask round trip, over a second on a loaded machine), or this process's
threads running late, no longer makes it late. Such an action is in flight until its answer
is back, and the run's end waits for it, but not for ever: one still without an answer
``END_GRACE_S`` past its lead after its time is given up (``Scheduler.unanswered``; its row
says it failed) and the run ends. An action due after a pending end of the run (``$ns
halt``) is not handed over early, so it is skipped as on one host; one due within
``lead_s`` after an end nobody scheduled (`nestbed halt`, a signal) takes effect after that
end, and its row says when.
"""

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

# action, source, planned_s, and the time.monotonic() it is due at where it was handed over
# ahead of that time (None: it is due now)
Perform = Callable[[Action, str, float | None, float | None], object]
Lead = Callable[[Action], float]  # how long ahead of its time an action is handed over
ENDS = ("halt", "terminate", "swapout")  # the verbs of ``ns`` that end the run
# The run's end waits for an action handed over ahead of its time until its lead (the hop
# there) and this much more (the hop back, on a loaded machine) have passed after its time.
END_GRACE_S = 5.0


@dataclass(order=True)
class Pending:
    """An action waiting for its time."""

    release: float  # time.monotonic() it goes to its worker: ``due`` less its lead
    seq: int
    due: float = field(compare=False)  # time.monotonic() it takes effect
    action: Action = field(compare=False)
    source: str = field(compare=False)  # static, timeline, dynamic, sequence
    planned_s: float = field(compare=False)  # since the run's t0
    timeline: str | None = field(compare=False, default=None)
    lead_s: float = field(compare=False, default=0.0)

    def at(self, due: float) -> None:
        self.due, self.release = due, due - self.lead_s

    @property
    def ends_run(self) -> bool:
        return self.action.object == "ns" and self.action.verb in ENDS

    def given_up_at(self) -> float:
        """When the run's end stops waiting for it in flight (time.monotonic())."""
        return self.due + self.lead_s + END_GRACE_S


def _no_lead(_: Action) -> float:
    return 0.0


def _by_time(item: Pending) -> tuple[float, int]:
    return item.due, item.seq


class Scheduler:
    """Holds pending actions and hands each to its object's worker when it is due."""

    def __init__(self, perform: Perform, lead: Lead = _no_lead):
        self.perform, self.lead = perform, lead
        self.t0 = time.monotonic()
        self.lock = threading.RLock()
        self.wake = threading.Condition(self.lock)
        self.queue: list[Pending] = []
        self.workers: dict[str, queue.SimpleQueue[Pending | None]] = {}
        self.timelines_pending: dict[str, int] = {}
        self.seq = itertools.count()
        self.ending = False
        self.in_flight: dict[int, Pending] = {}  # by seq: handed over ahead of time, not done
        self.answered: set[int] = set()  # of in_flight: answered, its row being written
        self.unanswered: list[Pending] = []  # in flight when the run's end gave up on them
        self.given_up: set[int] = set()  # their seqs
        self.carrying = threading.local()  # .seq: the action a thread handed over early has
        # The pending ends of the run (``$ns halt``), soonest first, for an action handed
        # over early to ask whether the run ends before it: a heap whose entries no longer
        # in ``ends_pending`` (handed out, dropped) are removed when they come to its top.
        self.ends: list[tuple[float, int]] = []
        self.ends_pending: set[int] = set()

    def now_s(self) -> float:
        """Seconds since the run's t0."""
        return time.monotonic() - self.t0

    def since_t0(self, monotonic: float) -> float:
        """A ``time.monotonic()`` as seconds since the run's t0."""
        return monotonic - self.t0

    def begin(self) -> None:
        """Sets t0 now and starts handing out what was pushed (relative to it)."""
        with self.wake:
            self.t0 = time.monotonic()
            for item in self.queue:
                item.at(self.t0 + item.planned_s)
            heapq.heapify(self.queue)
            self._index_ends()
            for item in self.queue:
                self._worker(item.action.object)  # threads ready before their first event
        threading.Thread(target=self._schedule, name="scheduler", daemon=True).start()

    def push(self, action: Action, source: str, at_s: float, timeline: str | None = None) -> None:
        """Schedules ``action`` at ``at_s`` seconds since t0."""
        with self.wake:
            if self.ending:
                raise Refused("the run has ended; no more events are accepted")
            lead = self.lead(action)
            due = self.t0 + at_s
            item = Pending(due - lead, next(self.seq), due, action, source, at_s, timeline, lead)
            heapq.heappush(self.queue, item)
            if item.ends_run:
                heapq.heappush(self.ends, (item.due, item.seq))
                self.ends_pending.add(item.seq)
            if timeline:
                self.timelines_pending[timeline] = self.timelines_pending.get(timeline, 0) + 1
            self.wake.notify()

    def upcoming(self) -> list[Pending]:
        """Every pending action, soonest first."""
        with self.lock:
            return sorted(self.queue, key=_by_time)

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
            self._index_ends()
            self.timelines_pending[name] = 0
            self.wake.notify_all()
        return dropped

    def end(self) -> list[Pending] | None:
        """Stops handing out actions; what was still pending, soonest first (None when the
        scheduler had already ended). Actions in flight are waited for: they take effect at
        their time, and their rows are in before the run's tables close. One still in flight
        at its ``given_up_at`` is given up: it goes to ``unanswered``, and ``settle`` says
        so to its late answer."""
        with self.wake:
            if self.ending:
                return None
            self.ending = True
            skipped, self.queue = sorted(self.queue, key=_by_time), []
            self.ends, self.ends_pending = [], set()
            self.wake.notify_all()
            # Nothing enters the flight once ending: the last to be given up are known.
            deadlines = [(p.given_up_at(), seq) for seq, p in self.in_flight.items()]
            heapq.heapify(deadlines)
            while self.in_flight:
                while deadlines and deadlines[0][0] <= time.monotonic():
                    _, seq = heapq.heappop(deadlines)
                    if seq in self.in_flight and seq not in self.answered:
                        self.unanswered.append(self.in_flight.pop(seq))
                        self.given_up.add(seq)
                if self.in_flight:  # the answered ones write their rows meanwhile
                    self.wake.wait(deadlines[0][0] - time.monotonic() if deadlines else None)
        return skipped

    def settle(self) -> bool:
        """Whether the answer of the action this thread carries out, handed over ahead of
        its time, is still awaited (and from now on the run's end waits for its row): False
        once the end gave up on it and its row says so. True outside the scheduler's threads."""
        seq = getattr(self.carrying, "seq", None)
        with self.lock:
            if seq in self.in_flight:
                self.answered.add(seq)
            return seq not in self.given_up

    def retire(self) -> None:
        """Ends the worker threads (the next run of this process has its own)."""
        for items in self.workers.values():
            items.put(None)

    def _schedule(self) -> None:
        while True:
            with self.wake:
                while not self.ending and (
                    not self.queue or self.queue[0].release - time.monotonic() > _SPIN_S
                ):
                    wait = (
                        self.queue[0].release - time.monotonic() - _SPIN_S if self.queue else None
                    )
                    self.wake.wait(wait)
                if self.ending:
                    return
                item = heapq.heappop(self.queue)
                self.ends_pending.discard(item.seq)
                if item.lead_s and self._ends_before(item.due):
                    item.lead_s = 0.0  # at its time, when the run will have ended: skipped
                    item.at(item.due)
                    heapq.heappush(self.queue, item)
                    continue
                if item.lead_s:
                    self.in_flight[item.seq] = item
            while time.monotonic() < item.release:
                pass
            if item.lead_s:
                # A thread of its own: the object's next event need not wait for this one's
                # answer, which comes back a hop after its time (its hosts keep the order).
                threading.Thread(target=self._perform, args=(item,), daemon=True).start()
            else:
                self._worker(item.action.object).put(item)

    def _ends_before(self, due: float) -> bool:
        """Whether an end of the run is pending at or before ``due`` (amortised O(log n):
        the soonest pending end is the heap's top once the stale entries are gone)."""
        while self.ends and self.ends[0][1] not in self.ends_pending:
            heapq.heappop(self.ends)
        return bool(self.ends) and self.ends[0][0] <= due

    def _index_ends(self) -> None:
        """``ends`` anew from the queue (after it was re-timed or cut)."""
        self.ends = [(p.due, p.seq) for p in self.queue if p.ends_run]
        heapq.heapify(self.ends)
        self.ends_pending = {seq for _, seq in self.ends}

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
        while (item := items.get()) is not None:
            self._perform(item)

    def _perform(self, item: Pending) -> None:
        self.carrying.seq = item.seq if item.lead_s else None
        try:
            self.perform(item.action, item.source, item.planned_s,
                         item.due if item.lead_s else None)  # fmt: skip
        finally:
            with self.wake:
                self.in_flight.pop(item.seq, None)
                self.answered.discard(item.seq)
                if item.timeline:
                    self.timelines_pending[item.timeline] -= 1
                self.wake.notify_all()
