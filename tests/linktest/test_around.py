"""linktest around the experiment's own doing, as pure logic: when each level ran, which of
the file's link events and traffic fall in it, what linkd's counters show, and how the
report says "not tested" instead of failing."""

from __future__ import annotations

import math

from nbtest import EXAMPLES
from nestbed.backend.plan import plan
from nestbed.linktest import around
from nestbed.linktest.run import Check, Report
from nestbed.spec import load

DUMBBELL = load(EXAMPLES / "dumbbell.ns").experiment


def test_each_level_lies_within_its_window_whatever_the_delay_before_the_test():
    spans = around.windows(2.0, 20.0, {1: 5.0, 2: 3.0, 3: 6.0})
    # 18 s elapsed for 14 s of levels: the test began up to 4 s late.
    assert [(w.level, w.start_s, w.end_s) for w in spans] == [
        (1, 2.0, 11.0), (2, 7.0, 14.0), (3, 10.0, 20.0)]  # fmt: skip


def test_the_dumbbells_traffic_crosses_its_routes_both_ways():
    paths = around.traffic_paths(DUMBBELL, plan(DUMBBELL))
    assert paths == {"cbr0": {"access1", "bottleneck", "access3"},
                     "ftp0": {"access2", "bottleneck", "access4"}}  # fmt: skip


def test_right_after_swap_in_the_files_events_and_traffic_are_not_tested():
    spans = around.windows(0.5, 30.0, {1: 6.0, 2: 2.0, 3: 8.0, 4: 10.0})
    untested = around.not_tested(DUMBBELL, plan(DUMBBELL), spans)
    # Level 1 (0.5 to 10 s): the bottleneck goes down at 8 s, CBR and FTP run.
    assert "bottleneck down` at 8 s" in untested[1]["bottleneck"]
    assert untested[1]["access1"] == "the experiment's traffic (cbr0) shared the link"
    # Routing cares about the event only, not about traffic.
    assert set(untested[2]) == {"bottleneck"}
    # Level 4 (16.5 to 30 s) is after `$ns halt` at 15 s: nothing of the file happens.
    assert 4 not in untested


def test_after_the_traffic_stopped_only_what_still_runs_counts():
    late = around.Window(3, 14.5, 20.0)
    assert around.traffic_during(DUMBBELL, [], late) == set()
    early = around.Window(1, 0.2, 0.8)
    assert around.traffic_during(DUMBBELL, [], early) == set()  # CBR starts at 1 s
    # Started by hand before the test, and no event of the file stops it in time.
    assert around.traffic_during(DUMBBELL, ["cbr0"], early) == {"cbr0"}
    assert around.end_of_events(DUMBBELL) == 15.0
    assert around.end_of_events(DUMBBELL.model_copy(update={"events": ()})) == math.inf


def test_counters_that_grow_with_no_probe_mark_their_link():
    row = {"link": "access1", "port": "h1", "direction": "egress", "packets_out": 10}
    quiet = {**row, "link": "access2"}
    before = [row, quiet]
    after = [{**row, "packets_out": 12}, quiet]
    assert around.counted_traffic(before, after) == {"access1"}


def test_not_tested_checks_are_skips_with_their_reason_and_others_stay():
    checks = [
        Check(1, "access1", "h1 → r1", "1 ms", "9 ms", "fail", "too slow"),
        Check(1, "access2", "h2 → r1", "1 ms", "1 ms", "pass"),
        Check(2, "access1 bottleneck", "h1 → r2", "arrives", "lost", "fail"),
        Check(3, "access1", "h1 → r1", "0 %", "0 %", "pass"),
    ]
    report = Report("dumbbell", 3, checks)
    around.set_aside(report, {1: {"access1": "the experiment's traffic (cbr0) shared the link"},
                              2: {"bottleneck": "an event"}})  # fmt: skip
    assert [c.verdict for c in checks] == ["skip", "pass", "skip", "pass"]
    assert checks[0].reason == "not tested: the experiment's traffic (cbr0) shared the link"
    assert checks[2].reason == "not tested: an event"
    assert not report.failures and len(report.notes) == 2
