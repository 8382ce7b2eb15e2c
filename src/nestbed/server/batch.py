"""The batch queue's policy (Emulab's batch mode): which queued experiment starts next, and the
moves of an entry through its states. Pure: the server stores the entries (one ``BatchEntry``
per row, ``to_dict``/``from_dict``), asks admission whether one fits, and carries out the pick.

    queued ──> running ──> done
      │  ▲         │──> failed            (a failure that retrying cannot mend, or the last try)
      │  └─────────┘                      (a failure: queued again, retried after the wait)
      └──────────┴──> cancelled

**Order.** Higher ``priority`` first; within a priority, first submitted first (FIFO), then the
lower id. An entry whose last attempt failed less than ``retry_wait_s`` ago (Emulab's
``batch/retry_wait``, 900 s) is not eligible and blocks nobody; once eligible it keeps its
place (its submission time).

**No starvation.** The first eligible entry that fits starts, even behind entries that do not
fit (they would otherwise hold the machine idle). Each time an entry behind one starts, the one
passed over counts it; once an entry has been passed over ``reserve_after`` times it reserves:
nothing behind it starts until it has started, so the experiments swapping out make room for
it rather than for newcomers. Entries ahead of it still start when they fit. An entry that
could not fit even on an empty machine must be refused at submission (admission's
``Decision.fits_empty``), or it would hold the queue for ever once it reserves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from nestbed.errors import UserError
from nestbed.store.records import ProjectSettingsRecord

EMULAB_RETRY_WAIT_S = 900.0


class BatchState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TRANSITIONS: dict[BatchState, frozenset[BatchState]] = {
    BatchState.QUEUED: frozenset({BatchState.RUNNING, BatchState.CANCELLED}),
    BatchState.RUNNING: frozenset(
        {BatchState.DONE, BatchState.QUEUED, BatchState.FAILED, BatchState.CANCELLED}
    ),
    BatchState.DONE: frozenset(),
    BatchState.FAILED: frozenset(),
    BatchState.CANCELLED: frozenset(),
}
"""For each state, the states an entry may move to from it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPolicy:
    retry_wait_s: float = EMULAB_RETRY_WAIT_S  # after a failed attempt, before the next
    max_attempts: int | None = None  # None: retried until it works or is cancelled (Emulab)
    reserve_after: int = 3  # passed over this many times, an entry holds the queue

    def __post_init__(self) -> None:
        if self.retry_wait_s < 0:
            raise UserError(f"batch setting retry_wait_s must not be negative: {self.retry_wait_s}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise UserError(f"batch setting max_attempts must be at least 1: {self.max_attempts}")
        if self.reserve_after < 0:
            raise UserError(
                f"batch setting reserve_after must not be negative: {self.reserve_after}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchEntry:
    """One batch experiment in the queue; times are seconds on the server's (Unix) clock."""

    id: int
    experiment: str
    project: str
    submitted_at_s: float
    priority: int = 0  # higher starts first
    state: BatchState = BatchState.QUEUED
    attempts: int = 0  # times started
    last_failure_at_s: float | None = None
    last_failure: str = ""  # why the last attempt failed, one sentence
    passed_over: int = 0  # entries behind it started while it did not fit, since it queued

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": str(self.state)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchEntry:
        return cls(**{**data, "state": BatchState(data["state"])})


@dataclass(frozen=True, slots=True)
class Pick:
    """What ``next_runnable`` chose: the entry to start now (then ``start`` it), or None and why
    not; ``passed_over`` are entries whose count went up, to be saved with the start."""

    entry: BatchEntry | None
    passed_over: tuple[BatchEntry, ...] = ()
    waiting: str = ""


def order(entries: Iterable[BatchEntry]) -> list[BatchEntry]:
    """The queued entries in the order they are considered."""
    queued = [e for e in entries if e.state is BatchState.QUEUED]
    return sorted(queued, key=lambda e: (-e.priority, e.submitted_at_s, e.id))


def retry_at(entry: BatchEntry, policy: BatchPolicy) -> float | None:
    """When a failed entry becomes eligible again (None: it has not failed)."""
    if entry.last_failure_at_s is None:
        return None
    return entry.last_failure_at_s + policy.retry_wait_s


def next_runnable(
    entries: Iterable[BatchEntry],
    now_s: float,
    fits: Callable[[BatchEntry], bool],
    policy: BatchPolicy | None = None,
) -> Pick:
    """The entry to start now, by the rules of the module docstring. ``fits`` says whether an
    entry fits on the machine now (admission with the live experiments)."""
    policy = policy or BatchPolicy()
    queue = order(entries)
    if not queue:
        return Pick(None, waiting="the batch queue is empty")
    blocked: list[BatchEntry] = []
    resting: list[tuple[float, BatchEntry]] = []
    for entry in queue:
        wait_until = retry_at(entry, policy)
        if wait_until is not None and now_s < wait_until:
            resting.append((wait_until, entry))
            continue
        if fits(entry):
            bumped = tuple(replace(b, passed_over=b.passed_over + 1) for b in blocked)
            return Pick(entry, bumped)
        if entry.passed_over >= policy.reserve_after:
            return Pick(
                None,
                waiting=f"batch experiment {entry.experiment} does not fit yet and, passed over "
                f"{entry.passed_over} times, holds the queue until it does",
            )
        blocked.append(entry)
    if blocked:
        return Pick(None, waiting=f"none of the {len(blocked)} eligible batch experiments fits now")
    soonest, first = min(resting, key=lambda r: r[0])
    return Pick(
        None,
        waiting=f"every queued batch experiment waits to be retried; the first, "
        f"{first.experiment}, in {soonest - now_s:.0f} s",
    )


def _move(entry: BatchEntry, to: BatchState, **changes: Any) -> BatchEntry:
    if to not in TRANSITIONS[entry.state]:
        raise UserError(
            f"batch experiment {entry.experiment} is {entry.state}; it cannot become {to}"
        )
    return replace(entry, state=to, **changes)


def start(entry: BatchEntry) -> BatchEntry:
    """The entry as started: running, one more attempt, no longer passed over."""
    return _move(entry, BatchState.RUNNING, attempts=entry.attempts + 1, passed_over=0)


def finish(
    entry: BatchEntry,
    now_s: float,
    *,
    ok: bool,
    reason: str = "",
    retry: bool = True,
    policy: BatchPolicy | None = None,
) -> BatchEntry:
    """The entry after its attempt ended: done; or, failed with ``reason``, queued again for a
    retry after the wait — unless ``retry`` is False (a failure retrying cannot mend, such as
    an experiment file with an error) or it has had its ``max_attempts``, then failed."""
    policy = policy or BatchPolicy()
    if ok:
        return _move(entry, BatchState.DONE)
    last = policy.max_attempts is not None and entry.attempts >= policy.max_attempts
    to = BatchState.FAILED if last or not retry else BatchState.QUEUED
    return _move(entry, to, last_failure_at_s=now_s, last_failure=reason)


def cancel(entry: BatchEntry) -> BatchEntry:
    """The entry as cancelled. A running one must also be swapped out by the caller."""
    return _move(entry, BatchState.CANCELLED)


def check_priority(own: ProjectSettingsRecord, priority: int) -> None:
    """``UserError`` unless a batch submission of ``priority`` is within the project's
    limits."""
    low, high = own.priority_min, own.priority_max
    if (low is not None and priority < low) or (high is not None and priority > high):
        allowed = f"{'' if low is None else low} to {'' if high is None else high}".strip()
        raise UserError(
            f"batch priority {priority} is outside project {own.project}'s limits "
            f"({allowed}); ask for a priority within them"
        )
