"""Link events on emulators a hop away (a cluster's hosts) are handed over ahead of their
time, with that time, and take effect then; the run's end waits for them, and one due after
a pending end of the run is not handed over early. Without root: a scheduler, the run's link
states and its actions over a recording back end."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nbtest import build
from nestbed.backend.linkd import Request
from nestbed.backend.plan import plan
from nestbed.control import scheduler as scheduler_module
from nestbed.control.actions import Actions
from nestbed.control.links import LinkStates
from nestbed.control.scheduler import Scheduler
from nestbed.errors import EnvironmentProblem
from nestbed.model import Action
from nestbed.results.tables import EVENT_COLUMNS, Table

LINKED = """
nodes: [{name: a}, {name: b}]
links: [{name: l0, members: [a, b], bandwidth: 10Mb, delay: 5ms}]
"""
LEAD_S = 30.0  # far longer than any stall of a loaded machine: "ahead" is never in doubt


def _link(verb: str) -> Action:
    return Action(object="l0", verb=verb)


class Recorded:
    """What the scheduler handed over, in order, with the due time given."""

    def __init__(self, hold: threading.Event | None = None):
        self.handed: list[tuple[str, float | None]] = []
        self.hold = hold

    def perform(self, action: Action, source: str, planned_s: Any, due: float | None) -> None:
        self.handed.append((f"{action.object} {action.verb}", due))
        if self.hold is not None and due is not None:
            self.hold.wait()


def _lead(action: Action) -> float:
    return LEAD_S if action.object == "l0" else 0.0


def test_a_link_event_is_handed_over_ahead_of_its_time_with_that_time():
    done = Recorded()
    scheduler = Scheduler(done.perform, _lead)
    scheduler.push(_link("down"), "static", 5.0)
    scheduler.push(Action(object="p", verb="start"), "static", 0.3)
    scheduler.begin()
    deadline = time.monotonic() + 60
    while len(done.handed) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    scheduler.end()
    # The link's event, due at 5 s, went before the program's at 0.3 s; the program's is
    # handed over at its time, with none.
    assert done.handed == [("l0 down", scheduler.t0 + 5.0), ("p start", None)]


def test_the_runs_end_waits_for_a_link_event_in_flight():
    hold = threading.Event()
    done = Recorded(hold)
    scheduler = Scheduler(done.perform, _lead)
    scheduler.push(_link("down"), "static", 1.0)
    scheduler.begin()
    while not done.handed:
        time.sleep(0.01)
    ended = _ending(scheduler)
    assert not ended.wait(0.3)  # its hosts have not applied it yet
    hold.set()
    assert ended.wait(60)


def _ending(scheduler: Scheduler) -> threading.Event:
    """Set once ``scheduler.end()``, called now in a thread of its own, has returned."""
    ended = threading.Event()
    threading.Thread(target=lambda: (scheduler.end(), ended.set()), daemon=True).start()
    return ended


def test_a_link_event_due_after_a_pending_halt_is_not_handed_over_early():
    done = Recorded()
    scheduler = Scheduler(done.perform, _lead)
    scheduler.push(Action(object="ns", verb="halt"), "static", 20.0)
    scheduler.push(_link("down"), "static", 25.0)
    scheduler.begin()
    time.sleep(0.3)
    skipped = scheduler.end()
    assert done.handed == []
    assert [f"{p.action.object} {p.action.verb}" for p in skipped] == ["ns halt", "l0 down"]


class TimedLinkd:
    """A cluster's link emulators as the controller sees them: requests taken with their
    time, applied there ``late_s`` after it."""

    def __init__(self, late_s: float):
        self.late_s = late_s
        self.timed: list[tuple[float, list[Request]]] = []

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        raise AssertionError(f"{op} sent untimed")

    def request_at(self, due: float, requests: list[Request]) -> float:
        self.timed.append((due, requests))
        return due + self.late_s

    def close(self) -> None:
        pass


class Refusing(TimedLinkd):
    """Link emulators whose host turns a change down at once, well before its time."""

    def request_at(self, due: float, requests: list[Request]) -> float:
        self.timed.append((due, requests))
        raise EnvironmentProblem("host h2 did not apply the change: no agent connected")


class Silent(TimedLinkd):
    """Link emulators whose host never answers until ``answer`` is set; then it says it
    applied the change at its time."""

    def __init__(self) -> None:
        super().__init__(late_s=0.0)
        self.answer = threading.Event()

    def request_at(self, due: float, requests: list[Request]) -> float:
        self.timed.append((due, requests))
        self.answer.wait()
        return due


class HopAway:
    link_lead_s = LEAD_S

    def __init__(self, linkd: TimedLinkd):
        self.channel = linkd

    def linkd(self, _plan):
        return self.channel


def _actions(
    tmp_path: Path, linkd: TimedLinkd, scheduler: Scheduler | None = None
) -> tuple[Actions, LinkStates, list[dict[str, Any]]]:
    """The run's actions over link emulators a hop away, and the rows they record."""
    exp = build(LINKED)
    links = LinkStates(exp, plan(exp), HopAway(linkd))  # type: ignore[arg-type]
    events = Table(tmp_path / "events.csv", EVENT_COLUMNS)
    rows: list[dict[str, Any]] = []
    events.add = rows.append  # type: ignore[method-assign]
    scheduler = scheduler or Scheduler(lambda *a: None)
    actions = Actions(exp, scheduler, links, {}, {}, None, events, lambda *a: None)  # type: ignore[arg-type]
    return actions, links, rows


def test_a_timed_link_events_row_says_when_its_hosts_applied_it(tmp_path: Path):
    linkd = TimedLinkd(late_s=0.004)
    actions, links, rows = _actions(tmp_path, linkd)
    assert links.lead_s("l0") == LEAD_S and links.lead_s("elsewhere") == 0.0
    scheduler = actions.scheduler
    due = scheduler.t0 + 2.0
    actions.perform(_link("down"), "static", 2.0, due)
    ((asked_due, requests),) = linkd.timed
    assert asked_due == due and requests == [("down", {"link": "l0", "mode": "blackhole"})]
    assert links.state["l0"] == "down"
    (row,) = rows
    assert row["outcome"] == "ok"
    assert abs(row["actual_s"] - 2.004) < 1e-9 and abs(row["error_ms"] - 4.0) < 1e-6


def test_a_links_next_change_starts_from_the_planned_one_and_a_late_answer_keeps_the_later(
    tmp_path: Path,
):
    exp = build(LINKED)
    linkd = TimedLinkd(late_s=0.0)
    links = LinkStates(exp, plan(exp), HopAway(linkd))  # type: ignore[arg-type]
    t = time.monotonic()
    # Both are handed over before either comes back: the second is planned on the first.
    first = threading.Thread(target=links.apply, args=("l0", "delay", ("50ms",), t + 1))
    release = threading.Event()
    linkd.request_at = _held(linkd.request_at, release, t + 1)  # type: ignore[method-assign]
    first.start()
    while not linkd.timed:
        time.sleep(0.01)
    links.apply("l0", "bandwidth", ("1Mb",), t + 2)  # comes back first
    release.set()
    first.join()
    sent = [fields["params"] for _, requests in linkd.timed for _, fields in requests]
    assert [p["delay"]["delay_ns"] for p in sent] == [50_000_000] * 2 + [50_000_000] * 2
    kept = [port.egress for port in links.links["l0"].ports]  # the later change, on the earlier
    assert [(e.bandwidth_bps, e.delay_s) for e in kept] == [(1_000_000, 0.05)] * 2


def _held(request_at, release: threading.Event, due_held: float):
    def held(due, requests):
        answer = request_at(due, requests)
        if due == due_held:
            release.wait()
        return answer

    return held


def test_a_timed_change_its_hosts_did_not_apply_is_not_planned_on():
    exp = build(LINKED)
    linkd = TimedLinkd(late_s=0.0)
    links = LinkStates(exp, plan(exp), HopAway(linkd))  # type: ignore[arg-type]

    def unanswered(due, requests):
        raise TimeoutError("no answer within 300 s")

    linkd.request_at = unanswered  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        links.apply("l0", "delay", ("50ms",), time.monotonic() + 1)
    assert links.planned["l0"] == links.links["l0"] == links.original["l0"]


def test_a_timed_link_event_refused_ahead_of_its_time_says_it_failed_at_its_time_not_before(
    tmp_path: Path,
):
    actions, links, rows = _actions(tmp_path, Refusing(late_s=0.0))
    # Refused at once, LEAD_S before its time: before, its row said it happened then
    # (error_ms near -LEAD_S).
    actions.perform(_link("down"), "static", LEAD_S, actions.scheduler.t0 + LEAD_S)
    (row,) = rows
    assert row["outcome"] == "error" and "host h2" in row["message"]
    assert row["actual_s"] >= LEAD_S and row["error_ms"] >= 0.0
    assert links.state["l0"] == "up"


def test_the_runs_end_gives_up_on_a_link_event_its_hosts_do_not_answer_and_its_late_answer_adds_no_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A short lead and grace, so that the end gives up soon; before, it waited for ever.
    monkeypatch.setattr(scheduler_module, "END_GRACE_S", 0.1)
    linkd = Silent()
    run: dict[str, Actions] = {}
    answered = threading.Event()
    scheduler = Scheduler(lambda *a: (run["actions"].perform(*a), answered.set()),
                          lambda a: 0.2)  # fmt: skip
    actions, _, rows = _actions(tmp_path, linkd, scheduler)
    run["actions"] = actions
    scheduler.push(_link("down"), "static", 0.5)
    scheduler.begin()
    while not linkd.timed:
        time.sleep(0.01)
    assert _ending(scheduler).wait(60)
    (item,) = scheduler.unanswered
    assert not scheduler.in_flight and item.action == _link("down")
    actions.unanswered(item.action, item.source, item.planned_s, item.due)
    (row,) = rows
    assert row["outcome"] == "error" and "had not answered" in row["message"]
    assert row["error_ms"] >= 0.0
    linkd.answer.set()  # the answer comes after all: its row was written already
    assert answered.wait(60)
    assert len(rows) == 1


class Counted(list):
    """The scheduler's queue, counting the items read by walking it whole."""

    walked = 0

    def __iter__(self):
        for item in super().__iter__():
            Counted.walked += 1
            yield item


def test_events_handed_over_early_are_scheduled_without_walking_the_queue_for_each():
    count = 10_000
    done = Recorded()
    scheduler = Scheduler(done.perform, _lead)
    scheduler.queue = Counted()
    for i in range(count):  # all released at once: due within their lead
        scheduler.push(_link("down" if i % 2 else "up"), "static", 1.0 + i / count)
    scheduler.push(Action(object="ns", verb="halt"), "static", 100.0)
    scheduler.begin()
    deadline = time.monotonic() + 120
    while len(done.handed) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    scheduler.end()
    assert len(done.handed) == count
    # begin() and end() walk it a few times; before, each event handed over early read all of it
    # to look for a pending end (about count² / 2 reads).
    assert Counted.walked <= 4 * (count + 1)


def test_this_machines_linkd_takes_link_events_ahead_of_their_time_as_nestbed_spawn_takes_starts():
    from nestbed.backend.base import LOCAL_LEAD_S
    from nestbed.backend.linux import LinuxBackend

    exp = build(LINKED)
    links = LinkStates(exp, plan(exp), LinuxBackend())  # type: ignore[arg-type]
    assert links.lead_s("l0") == LinuxBackend.link_lead_s == LOCAL_LEAD_S > 0


class Untimed(TimedLinkd):
    """Link emulators that also take requests at once, recording them."""

    def __init__(self) -> None:
        super().__init__(late_s=0.0)
        self.now: list[tuple[str, dict[str, Any]]] = []

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self.now.append((op, fields))
        return {"ok": True}


def test_an_event_asked_for_now_is_sent_at_once_where_linkd_takes_changes_ahead(tmp_path: Path):
    linkd = Untimed()
    actions, links, rows = _actions(tmp_path, linkd)
    actions.perform(_link("down"), "dynamic", actions.scheduler.now_s())  # `nestbed event`
    assert linkd.now == [("down", {"link": "l0", "mode": "blackhole"})] and not linkd.timed
    assert rows[0]["outcome"] == "ok" and links.state["l0"] == "down"


class AppliedLate(TimedLinkd):
    """Link emulators that apply a change at its time or, past it, when they get it, and
    say when: a little after either."""

    def request_at(self, due: float, requests: list[Request]) -> float:
        self.timed.append((due, requests))
        self.answered = max(due, time.monotonic()) + 0.002
        return self.answered


def test_a_link_event_scheduled_within_its_lead_is_handed_over_at_once_and_timed_by_the_answer(
    tmp_path: Path,
):
    linkd = AppliedLate(late_s=0.0)
    run: dict[str, Actions] = {}
    done = threading.Event()
    lead_s = 0.05
    scheduler = Scheduler(lambda *a: (run["actions"].perform(*a), done.set()),
                          lambda a: lead_s)  # fmt: skip
    actions, links, rows = _actions(tmp_path, linkd, scheduler)
    run["actions"] = actions
    scheduler.begin()
    # A dynamic event a moment from now: its lead has passed already when it is pushed.
    at_s = scheduler.now_s() + lead_s / 5
    scheduler.push(_link("down"), "dynamic", at_s)
    assert done.wait(60)
    scheduler.end()
    ((due, _),) = linkd.timed
    assert due == scheduler.t0 + at_s  # its own time, not when it was handed over
    (row,) = rows
    assert row["outcome"] == "ok" and links.state["l0"] == "down"
    assert row["actual_s"] == linkd.answered - scheduler.t0  # when linkd said it applied it
    assert row["error_ms"] > 0


class TimedSimulator:
    """A nestbed-sim a hop away (a cluster's host), as ``RemoteSimulator`` is: commands
    handed over with their time, said carried out a millisecond after it; and at once."""

    lead_s = 3.0

    def __init__(self) -> None:
        self.timed: list[tuple[float, list[str]]] = []
        self.now: list[str] = []

    def request_at(self, due: float, lines: list[str]) -> float:
        self.timed.append((due, lines))
        return due + 0.001

    def request(self, *words: object) -> dict[str, Any]:
        self.now.append(" ".join(str(w) for w in words))
        return {"ok": True}

    def log(self, offset: int = 0) -> tuple[str, int] | None:
        return None

    def running(self) -> bool:
        return True

    def close(self) -> None:
        """Nothing is open."""


def test_a_simulated_links_events_on_another_host_are_handed_over_ahead_with_their_time():
    """As a link emulator's: the event goes to the simulator's host its lead ahead, and its
    time is when the host said nestbed-sim carried it out. Before, a simulated link had no
    lead on a cluster: its change left at its time and landed a Dask round trip late."""
    from nestbed.backend.sim import TimedSimulator as Timed
    from nestbed.control.simulated import SimulatedPart

    exp = build(LINKED)
    p = plan(exp)
    remote = TimedSimulator()
    assert isinstance(remote, Timed)
    part = SimulatedPart(p, remote)  # type: ignore[arg-type]
    part.links = {"l0"}
    links = LinkStates(exp, p, None, part)  # type: ignore[arg-type]
    assert links.lead_s("l0") == TimedSimulator.lead_s
    assert links.apply("l0", "down", (), due=100.0) == ("simulated link l0 is down", 100.001)
    message, applied = links.apply("l0", "delay", ("50ms",), due=101.0)
    assert (message, applied) == ("simulated link l0 changed", 101.001)
    (first, second) = remote.timed
    assert first == (100.0, ["link l0 down"])
    assert second[0] == 101.0 and second[1][0].startswith("p2p-set l0 ")
    assert not remote.now
    assert links.now()["links"] == {"l0": "down"}
