"""The batch queue's policy: FIFO within priorities, the retry wait, no starvation of a big
entry, and the moves of an entry through its states."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nestbed.errors import UserError
from nestbed.server.batch import (
    BatchEntry,
    BatchPolicy,
    BatchState,
    cancel,
    finish,
    next_runnable,
    order,
    start,
)


def entry(number: int, at: float, priority: int = 0, name: str | None = None) -> BatchEntry:
    return BatchEntry(id=number, experiment=name or f"e{number}", project="p",
                      submitted_at_s=at, priority=priority)  # fmt: skip


def always(_: BatchEntry) -> bool:
    return True


def test_fifo_within_priorities():
    queue = [entry(1, 30.0), entry(2, 10.0), entry(3, 20.0, priority=1), entry(4, 10.0)]
    assert [e.id for e in order(queue)] == [3, 2, 4, 1]
    assert next_runnable(queue, 100.0, always).entry == queue[2]


def test_only_queued_entries_are_considered():
    queue = [replace(entry(1, 0.0), state=s) for s in BatchState if s is not BatchState.QUEUED]
    pick = next_runnable(queue, 1.0, always)
    assert pick.entry is None and pick.waiting == "the batch queue is empty"


def test_a_failed_entry_waits_its_retry_time_and_blocks_nobody():
    first = finish(start(entry(1, 0.0)), 1000.0, ok=False, reason="swap-in failed")
    assert first.state is BatchState.QUEUED and first.attempts == 1
    second = entry(2, 5.0)
    assert next_runnable([first, second], 1000.0 + 899, always).entry == second
    alone = next_runnable([first], 1000.0 + 899, always)
    assert alone.entry is None
    assert alone.waiting == (
        "every queued batch experiment waits to be retried; the first, e1, in 1 s"
    )
    assert next_runnable([first, second], 1000.0 + 900, always).entry == first
    short = BatchPolicy(retry_wait_s=60)
    assert next_runnable([first, second], 1060.0, always, short).entry == first


def test_entries_that_fit_pass_a_big_one_until_it_reserves():
    big, small = entry(1, 0.0, name="big"), [entry(i, float(i)) for i in range(2, 7)]
    fits = lambda e: e.experiment != "big"  # noqa: E731
    queue = [big, *small]
    started = []
    for _ in range(3):
        pick = next_runnable(queue, 100.0, fits)
        assert pick.entry is not None and pick.passed_over[0].id == 1
        started.append(pick.entry.id)
        queue = [p for p in queue if p.id not in (pick.entry.id, 1)] + [pick.passed_over[0]]
    assert started == [2, 3, 4]
    held = next_runnable(queue, 100.0, fits)
    assert held.entry is None
    assert held.waiting == (
        "batch experiment big does not fit yet and, passed over 3 times, holds the queue "
        "until it does"
    )
    assert next_runnable(queue, 100.0, always).entry.experiment == "big"


def test_entries_ahead_of_a_reserving_one_still_start():
    urgent = entry(1, 50.0, priority=5)
    big = replace(entry(2, 0.0, name="big"), passed_over=3)
    pick = next_runnable([big, urgent, entry(3, 1.0)], 100.0, lambda e: e.id != 2)
    assert pick.entry == urgent and pick.passed_over == ()


def test_nothing_fits():
    pick = next_runnable([entry(1, 0.0), entry(2, 1.0)], 5.0, lambda e: False)
    assert pick.entry is None
    assert pick.waiting == "none of the 2 eligible batch experiments fits now"


def test_start_finish_and_the_last_attempt():
    policy = BatchPolicy(max_attempts=2)
    e = start(entry(1, 0.0))
    assert (e.state, e.attempts) == (BatchState.RUNNING, 1)
    assert finish(e, 9.0, ok=True).state is BatchState.DONE
    again = finish(e, 9.0, ok=False, reason="no", policy=policy)
    assert (again.state, again.last_failure_at_s, again.last_failure) == (
        BatchState.QUEUED,
        9.0,
        "no",
    )
    last = finish(start(again), 20.0, ok=False, reason="no again", policy=policy)
    assert (last.state, last.attempts, last.last_failure) == (BatchState.FAILED, 2, "no again")


def test_a_failure_retrying_cannot_mend_fails_at_once():
    e = finish(start(entry(1, 0.0)), 3.0, ok=False, reason="bad file", retry=False)
    assert e.state is BatchState.FAILED


def test_cancel_from_queued_or_running_only():
    assert cancel(entry(1, 0.0)).state is BatchState.CANCELLED
    assert cancel(start(entry(1, 0.0))).state is BatchState.CANCELLED
    done = finish(start(entry(1, 0.0)), 1.0, ok=True)
    with pytest.raises(UserError, match="batch experiment e1 is done; it cannot become cancelled"):
        cancel(done)
    with pytest.raises(UserError, match="is running; it cannot become running"):
        start(start(entry(1, 0.0)))


def test_an_entry_survives_the_store():
    e = finish(start(entry(7, 3.5, priority=2)), 9.0, ok=False, reason="x")
    row = e.to_dict()
    assert row["state"] == "queued" and BatchEntry.from_dict(row) == e


def test_a_policy_rejects_nonsense_in_one_sentence():
    with pytest.raises(UserError, match="max_attempts must be at least 1: 0"):
        BatchPolicy(max_attempts=0)
    with pytest.raises(UserError, match="retry_wait_s must not be negative"):
        BatchPolicy(retry_wait_s=-1)


def test_with_admission_a_big_experiment_runs_once_the_small_ones_behind_it_have_drained():
    """A virtual machine of 4 cores: a stream of 1-core experiments (each runs 10 ticks)
    would keep a 4-core one waiting for ever without its reservation."""
    from nestbed.server.admission import GIB, Demand, HostFacts, admit

    machine = HostFacts(cores=4, memory_bytes=64 * GIB)
    demand = {"big": Demand(nodes=4, quota_cores=4.0)}
    queue = [entry(1, 0.0, name="s1"), entry(2, 0.5, name="s2"), entry(3, 1.0, name="big")]
    queue += [entry(i, float(i), name=f"s{i}") for i in range(4, 40)]
    running: dict[str, float] = {}  # experiment -> when its run ends
    started: list[tuple[float, str]] = []
    for tick in range(200):
        now = float(tick)
        for name, end in list(running.items()):
            if end <= now:
                del running[name]
                queue = [finish(e, now, ok=True) if e.experiment == name else e for e in queue]
        live = [demand.get(n, Demand(nodes=1, quota_cores=1.0)) for n in running]

        def fits(e, live=live):  # type: ignore[no-untyped-def]
            want = demand.get(e.experiment, Demand(nodes=1, quota_cores=1.0))
            return admit(e.experiment, want, machine, live).fits

        pick = next_runnable(queue, now, fits)
        if pick.entry is None:
            continue
        bumped = {b.id: b for b in pick.passed_over}
        queue = [start(e) if e.id == pick.entry.id else bumped.get(e.id, e) for e in queue]
        running[pick.entry.experiment] = now + 10
        started.append((now, pick.entry.experiment))
    names = [n for _, n in started]
    big_at = names.index("big")
    # two started before it in order, then three passed it, then it held the queue
    assert names[:big_at] == ["s1", "s2", "s4", "s5", "s6"]
    assert started[big_at][0] == 20.0  # when the last of those five had ended
    assert all(s[0] >= 30.0 for s in started[big_at + 1 :])  # nothing beside it
