"""Idle detection: what makes an interval busy, when the owner is warned and when the
experiment is swapped out (idle time and maximum duration), exemption, and the state the
server keeps across a restart."""

from __future__ import annotations

import json

import pytest

from nestbed.errors import UserError
from nestbed.server.idle import (
    HOUR_S,
    Action,
    FakeSampler,
    IdleSettings,
    IdleState,
    Sample,
    Sessions,
    Why,
    activity,
    judge,
)

MIN_S = 60.0
SETTINGS = IdleSettings()


def at(t_s: float, packets: int = 0, cpu: float = 0.0, sessions: int = 0) -> Sample:
    return Sample(t_s, packets, packets * 100, {"a": cpu, "b": 0.0}, sessions)


def follow(samples, settings=SETTINGS, exempt=False, state=None):
    """Judges every sample in turn until a swap-out (which the server then carries out): the
    last state and the (time, verdict) of each action."""
    state = state or IdleState(swapped_in_at_s=samples[0].t_s)
    acted = []
    for sample in samples:
        state, verdict = judge(state, sample, settings, exempt=exempt)
        if verdict.action is not None:
            acted.append((sample.t_s, verdict))
        if verdict.action is Action.SWAP_OUT:
            break
    return state, acted


def every(step_s: float, until_s: float, start_s: float = 0.0, **kw) -> list[Sample]:
    n = int((until_s - start_s) // step_s) + 1
    return [at(start_s + i * step_s, **kw) for i in range(n)]


def test_what_makes_an_interval_busy():
    assert activity(at(0), at(60, packets=59), SETTINGS) == ""  # under 1 packet/s: chatter
    assert activity(at(0), at(60, packets=120), SETTINGS) == "2.0 packets/s sent into its links"
    assert activity(at(0), at(60, cpu=6.0), SETTINGS) == ""  # 0.1 of a core, not above
    assert activity(at(0), at(60, cpu=12.0), SETTINGS) == "node a used 0.20 cores"
    assert activity(at(0), at(60, sessions=2), SETTINGS) == "2 sessions open"
    # a counter that went down was reset: what it counts now is new
    assert activity(at(0, packets=1000), at(60, packets=30), SETTINGS) == ""
    assert activity(at(0, packets=1000), at(60, packets=300), SETTINGS).startswith("5.0 packets/s")


def test_an_idle_experiment_is_warned_half_an_hour_ahead_then_swapped_out_at_four_hours():
    _, acted = follow(every(10 * MIN_S, 6 * HOUR_S))
    (warn_t, warn), (swap_t, swap) = acted
    assert (warn_t, warn.action, warn.why) == (3.5 * HOUR_S, Action.WARN, Why.IDLE)
    assert warn.reason == (
        "idle for 3.5 h: it will be swapped out in 30 min unless it is used, or a project "
        "leader exempts it"
    )
    assert (swap_t, swap.action, swap.idle_for_s) == (4 * HOUR_S, Action.SWAP_OUT, 4 * HOUR_S)
    assert swap.reason == (
        "idle for 4.0 h (no traffic on its links, no session, its nodes' CPU low): swapped out, "
        "its results kept"
    )


def test_use_after_the_warning_resets_the_clock():
    samples = every(10 * MIN_S, 3.5 * HOUR_S)
    samples.append(at(3.5 * HOUR_S + 10 * MIN_S, sessions=1))  # the owner logs in
    samples += every(10 * MIN_S, 9 * HOUR_S, start_s=3.5 * HOUR_S + 20 * MIN_S)
    _, acted = follow(samples)
    times = [(t / MIN_S, v.action) for t, v in acted]
    # idle again from 3 h 40 min: warned at 7 h 10 min, swapped out at 7 h 40 min
    assert times == [(210, Action.WARN), (430, Action.WARN), (460, Action.SWAP_OUT)]


def test_a_late_look_warns_first_and_swaps_out_no_sooner_than_the_warning_promised():
    # sampling starts (say after a server restart) with the experiment already idle 5 h
    state = IdleState(swapped_in_at_s=0.0, idle_since_s=0.0, last=at(5 * HOUR_S - 60))
    state, verdict = judge(state, at(5 * HOUR_S), SETTINGS)
    assert verdict.action is Action.WARN and "swapped out in 30 min" in verdict.reason
    state, verdict = judge(state, at(5 * HOUR_S + 29 * MIN_S), SETTINGS)
    assert verdict.action is None
    _, verdict = judge(state, at(5 * HOUR_S + 30 * MIN_S), SETTINGS)
    assert verdict.action is Action.SWAP_OUT


def test_a_busy_experiment_is_swapped_out_at_its_maximum_duration():
    busy = [at(t, packets=10 * t) for t in range(0, int(17 * HOUR_S), int(10 * MIN_S))]
    _, acted = follow(busy)
    assert [(t / HOUR_S, v.action, v.why) for t, v in acted] == [
        (15.5, Action.WARN, Why.DURATION),
        (16.0, Action.SWAP_OUT, Why.DURATION),
    ]
    assert acted[0][1].reason == (
        "swapped in for 15.5 h: it reaches its maximum duration and will be swapped out in "
        "30 min, unless a project leader exempts it"
    )
    assert acted[0][1].busy == "10.0 packets/s sent into its links"


def test_an_exempt_experiment_is_never_swapped_out_but_its_idleness_is_reported():
    state, acted = follow(every(30 * MIN_S, 20 * HOUR_S), exempt=True)
    assert acted == []
    _, verdict = judge(state, at(20.5 * HOUR_S), SETTINGS, exempt=True)
    assert verdict.idle_for_s == 20.5 * HOUR_S
    # withdrawn after a warning: a fresh warning comes before any swap-out
    warned, verdict = judge(state, at(20.5 * HOUR_S), SETTINGS)
    assert verdict.action is Action.WARN and verdict.why is Why.DURATION
    state, verdict = judge(warned, at(21 * HOUR_S), SETTINGS, exempt=True)
    assert verdict.action is None
    _, verdict = judge(state, at(21.1 * HOUR_S), SETTINGS)
    assert verdict.action is Action.WARN


def test_a_projects_own_settings_without_warning_or_maximum():
    quick = IdleSettings(idle_s=HOUR_S, warn_before_s=0, max_duration_s=None)
    _, acted = follow(every(10 * MIN_S, 2 * HOUR_S), quick)
    assert [(t, v.action) for t, v in acted] == [(HOUR_S, Action.SWAP_OUT)]


def test_the_state_survives_the_store():
    state, _ = follow(every(10 * MIN_S, 3.6 * HOUR_S))
    assert state.warned_idle_at_s == 3.5 * HOUR_S
    assert IdleState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_settings_reject_nonsense_in_one_sentence():
    with pytest.raises(UserError, match="warn_before_s must be at least 0 and below idle_s"):
        IdleSettings(idle_s=60, warn_before_s=60)
    with pytest.raises(UserError, match="idle_s must be above 0"):
        IdleSettings(idle_s=0)


def test_sessions_count_while_open_and_the_fake_sampler_replays():
    sessions = Sessions()
    with sessions.opened("x"), sessions.opened("x"):
        assert sessions.count("x") == 2 and sessions.count("y") == 0
    assert sessions.count("x") == 0
    fake = FakeSampler([at(0), at(1, sessions=1)])
    assert [fake.sample().sessions, fake.sample().sessions] == [0, 1]


def test_a_session_that_ended_between_two_samples_is_seen_by_the_second():
    sessions = Sessions()
    with sessions.opened("x"):
        assert sessions.seen("x") == 1
    with sessions.opened("x"):
        pass  # a short exec between two samples
    # Both were open in the interval: the first until it ended, and the short one.
    assert [sessions.count("x"), sessions.seen("x"), sessions.seen("x")] == [0, 2, 0]


def test_spans_below_a_minute_are_said_in_seconds():
    from nestbed.server.idle import _hours

    assert [_hours(s) for s in (0.4, 20, 59.4, 61, 1800, 5400)] == [
        "0 s", "20 s", "59 s", "1 min", "30 min", "1.5 h"
    ]  # fmt: skip
