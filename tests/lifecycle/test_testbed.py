"""Orchestration over the fake back end: the state machine around every step, rollback
after a failed step, the next run of a reused network keeping its options, and cleanup
choosing what has no living owner."""

from __future__ import annotations

import pytest

from nbtest import experiment
from nestbed.backend.plan import experiment_tag, plan
from nestbed.errors import EnvironmentProblem, InternalError, UserError
from nestbed.lifecycle import locks
from nestbed.lifecycle.runs import run
from nestbed.model.options import RunOptions
from nestbed.store import State

LINE = """
nodes: [{name: a}, {name: r}, {name: b}]
links:
  - {name: link0, members: [a, r], delay: 10ms}
  - {name: link1, members: [r, b], bandwidth: 10Mb}
events:
  - {at: 1, object: link0, verb: down}
"""


def _defined(testbed, name: str = "line"):  # type: ignore[no-untyped-def]
    exp = experiment(LINE, name)
    testbed.define(exp)
    return exp


def test_swap_in_then_out_walks_the_states_and_leaves_nothing(testbed, fake, controllers):
    exp = _defined(testbed)
    active = testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r"))
    assert testbed.store.get(exp.name).state == State.ACTIVE
    start = controllers.started[exp.name][0]
    assert start["backend"] == "fake" and start["run_id"] == active.run_id
    assert start["options"]["results"] == str(fake.state_root / "r")
    testbed.swap_out(exp.name)
    history = [c.to_state for c in testbed.store.history(exp.name)]
    assert history[-4:] == ["swapping-in", "active", "swapping-out", "swapped"]
    assert fake.leftovers() == {}
    assert [r.outcome for r in testbed.store.runs(exp.name)] == ["completed"]


@pytest.mark.parametrize("step", ["swap_in", "launch"])
def test_a_failed_step_of_swap_in_rolls_everything_back(testbed, fake, controllers, step):
    exp = _defined(testbed)
    if step == "swap_in":
        fake.fail.add("swap_in")
        expected = EnvironmentProblem
    else:
        controllers.fail_launch = True
        expected = InternalError
    with pytest.raises(expected):
        testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r"))
    assert testbed.store.get(exp.name).state == State.FAILED
    assert fake.leftovers() == {}
    assert all(r.outcome == "failed" for r in testbed.store.runs(exp.name))
    # The lock went with the failed swap-in: the experiment can be swapped in again.
    assert not locks.owned(fake.state_root, experiment_tag(exp.name))
    fake.fail.clear()
    controllers.fail_launch = False
    testbed.swap_out(exp.name)  # a failed experiment is settled by a swap-out
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "again"))
    assert testbed.store.get(exp.name).state == State.ACTIVE


def test_options_naming_nodes_are_checked_against_the_experiment(testbed, fake):
    exp = _defined(testbed)
    with pytest.raises(UserError, match="has no node 'z' for --cpumon; its nodes are a, r, b"):
        testbed.swap_in(exp.name, RunOptions(cpumon=("z",)))
    assert testbed.store.get(exp.name).state == State.DEFINED  # refused before anything
    assert fake.journal() == [{"op": "require_ready"}]


def test_the_next_run_of_a_reused_network_keeps_its_options_and_resets_changed_pipes(
    testbed, fake, controllers
):
    exp = _defined(testbed)
    options = RunOptions(results=fake.state_root / "r1", capture=True, cpumon=("all",),
                         cpumon_duty=0.2, report=False)  # fmt: skip
    testbed.swap_in(exp.name, options)
    slower = experiment(LINE.replace("bandwidth: 10Mb", "bandwidth: 10Mb, delay: 50ms"), "line")
    second = options.model_copy(update={"results": fake.state_root / "r2"})
    active = testbed.next_run(exp.name, slower, second)
    op, fields = controllers.requests[exp.name][-1]
    assert op == "next_run"
    kept = fields["start"]["options"]
    assert kept["capture"] and kept["cpumon"] == ["a", "r", "b"] and kept["cpumon_duty"] == 0.2
    assert kept["results"] == str(fake.state_root / "r2") and not kept["report"]
    assert fields["start"]["reused_runs"] == 1
    sets = [r for r in fake.linkd(active.plan).requests() if r["op"] == "set"]
    assert sets and {r["link"] for r in sets} == {"link1"}
    assert [r.outcome for r in testbed.store.runs(exp.name)] == ["completed", None]


def test_a_next_run_that_rewires_the_network_is_refused(testbed, fake):
    exp = _defined(testbed)
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r1"))
    other = experiment(LINE.replace("{name: b}]", "{name: b}, {name: c}]"), "line")
    with pytest.raises(UserError, match="changes more than link shaping"):
        testbed.next_run(exp.name, other)


def test_cleanup_takes_only_what_has_no_living_owner(testbed, fake, controllers):
    live, crashed = _defined(testbed, "live"), _defined(testbed, "crashed")
    testbed.swap_in(live.name, RunOptions(results=fake.state_root / "live"))
    testbed.swap_in(crashed.name, RunOptions(results=fake.state_root / "crashed"))
    # Two networks no store knows: one whose owner lives, one orphaned.
    mine, other = experiment(LINE, "owned"), experiment(LINE, "orphan")
    for exp in (mine, other):
        fake.swap_in(plan(exp))
    # The stand-in controllers hold no lock; a living controller would hold its experiment's.
    holders = [locks.ExperimentLock(fake.state_root, n).acquire() for n in (live.name, mine.name)]
    controllers.dead.add(crashed.name)
    try:
        done = testbed.cleanup()
    finally:
        for lock in holders:
            lock.release()
    assert done.settled == [crashed.name]
    assert sorted(done.removed) == sorted(plan(other).namespaces)
    assert live.name in done.spared
    assert testbed.store.get(live.name).state == State.ACTIVE
    assert testbed.store.get(crashed.name).state == State.SWAPPED
    assert set(fake.leftovers()) == {experiment_tag(live.name), experiment_tag(mine.name)}
    ended = [r.outcome for r in testbed.store.runs(crashed.name)]
    assert ended == ["failed"]


def test_cleanup_of_one_experiment_touches_no_other(testbed, fake, controllers):
    one, two = _defined(testbed, "one"), _defined(testbed, "two")
    for exp in (one, two):
        testbed.swap_in(exp.name, RunOptions(results=fake.state_root / exp.name))
    done = testbed.cleanup(one.name, everything=True)
    assert done.settled == [one.name]
    assert testbed.store.get(two.name).state == State.ACTIVE
    assert set(fake.leftovers()) == {experiment_tag(two.name)}


def test_cleanup_by_name_finds_what_an_experiment_of_another_store_left(testbed, fake):
    # A sweep's point, say, whose folder (and store) was deleted; another experiment lives.
    gone, other = experiment(LINE, "s-p0000-r0"), experiment(LINE, "bystander")
    for exp in (gone, other):
        fake.swap_in(plan(exp))
    holder = locks.ExperimentLock(fake.state_root, gone.name).acquire()
    try:
        done = testbed.cleanup(gone.name)  # its controller lives: spared without --all
    finally:
        holder.release()
    assert done.removed == [] and done.spared
    done = testbed.cleanup(gone.name)
    assert sorted(done.removed) == sorted(plan(gone).namespaces)
    assert set(fake.leftovers()) == {experiment_tag(other.name)}
    with pytest.raises(UserError, match="no experiment named 'typo'"):
        testbed.cleanup("typo")


def test_a_whole_run_swaps_in_waits_and_swaps_out(testbed, fake, controllers):
    exp = _defined(testbed)
    summary = run(testbed, exp.name, RunOptions(results=fake.state_root / "r", duration_s=2))
    assert summary["results"] == str(fake.state_root / "r")
    assert testbed.store.get(exp.name).state == State.SWAPPED
    ops = [op for op, _ in controllers.requests[exp.name]]
    assert ops[0] == "status" and ops[-2:] == ["finish", "shutdown"]
    assert fake.leftovers() == {}


def test_a_kept_run_ends_its_run_but_stays_active(testbed, fake, controllers):
    exp = _defined(testbed)
    run(testbed, exp.name, RunOptions(results=fake.state_root / "r", keep=True))
    assert testbed.store.get(exp.name).state == State.ACTIVE
    assert controllers.requests[exp.name][-1][0] == "finish"


def test_commands_on_an_experiment_that_is_not_active_say_what_to_do(testbed):
    exp = _defined(testbed)
    with pytest.raises(UserError, match="is defined, not active; swap it in first"):
        testbed.active(exp.name)


def test_the_plan_swap_in_carried_out_is_kept_and_reused_until_swap_out(
    testbed, fake, controllers, monkeypatch
):
    exp = _defined(testbed)
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r"))
    kept = plan(exp)

    def computed_again(_exp):  # type: ignore[no-untyped-def]
        raise AssertionError("the plan was computed again")

    monkeypatch.setattr("nestbed.lifecycle.testbed.plan", computed_again)
    monkeypatch.setattr("nestbed.backend.kept.plan", computed_again)
    assert testbed.active(exp.name).plan == kept  # status, exec, events
    testbed.swap_out(exp.name)
    swapped_out = [e for e in fake.journal() if e["op"] == "swap_out"]
    assert swapped_out and fake.leftovers() == {}


def test_a_kept_plan_of_another_ir_is_not_used(tmp_path):
    from nestbed.backend import kept

    first, second = experiment(LINE, "one"), experiment(LINE, "two")
    kept.keep(tmp_path, first, plan(first))
    assert kept.kept_plan(tmp_path, first.to_json()) == plan(first)
    assert kept.kept_plan(tmp_path, second.to_json()) is None
    assert kept.load(tmp_path, second.to_json()) == (second, plan(second))


def test_a_swap_in_killed_after_starting_its_controller_is_cleaned_up(testbed, fake, controllers):
    exp = _defined(testbed, "killed")
    # As if SIGKILL hit the swap-in between the controller's start and `active`: the network
    # is built, the store still says swapping-in, the orphaned controller holds the lock.
    testbed.store.transition(exp.name, State.SWAPPING_IN, reason="a test")
    fake.swap_in(plan(exp))
    controller = locks.ExperimentLock(fake.state_root, exp.name).acquire()
    try:
        done = testbed.cleanup(exp.name)
    finally:
        controller.release()
    assert done.settled == [exp.name]
    assert testbed.store.get(exp.name).state == State.SWAPPED
    assert fake.leftovers() == {}


def test_a_capture_path_on_the_fake_machine_is_never_run_as_a_command(fake, tmp_path):
    import subprocess

    hostile = tmp_path / 'x"; touch pwned; "y.pcap'
    argv = fake.capture_argv("eth0", hostile)
    done = subprocess.run(["timeout", "0.5", *argv], cwd=tmp_path, check=False)
    assert done.returncode == 124  # ran until stopped, as a capture does
    assert hostile.exists() and not (tmp_path / "pwned").exists()


def test_swap_out_and_the_commands_on_an_active_experiment_read_the_plan_alone(
    testbed, fake, controllers, monkeypatch
):
    exp = _defined(testbed)
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r"))
    from nestbed.model import Experiment

    real = Experiment.from_json

    def read(_json):  # type: ignore[no-untyped-def]
        raise AssertionError("the experiment was read")

    monkeypatch.setattr(Experiment, "from_json", read)
    active = testbed.active(exp.name)  # status, exec, events
    assert active.plan == plan(exp)
    monkeypatch.setattr(Experiment, "from_json", real)
    assert active.experiment == exp  # read from beside the plan when asked
    monkeypatch.setattr(Experiment, "from_json", read)
    testbed.swap_out(exp.name)
    assert testbed.store.get(exp.name).state == State.SWAPPED


def test_the_life_cycle_commands_load_neither_pydantic_nor_sqlalchemy():
    # What swapout, status and exec import (models and SQLAlchemy take a third of a second).
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import nestbed.cli, nestbed.cli.render, nestbed.lifecycle.testbed\n"
        "import nestbed.backend.linux, nestbed.store.writer, nestbed.backend.kept\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'sqlalchemy'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_plan_is_computed_once_per_ir_and_again_for_a_changed_experiment(
    testbed, fake, controllers, monkeypatch
):
    from nestbed.backend import kept

    exp = _defined(testbed)
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r1"))
    testbed.swap_out(exp.name)
    computed = []
    monkeypatch.setattr(kept, "plan", lambda e: computed.append(e.name) or plan(e))
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r2"))
    assert computed == [] and testbed.active(exp.name).plan == plan(exp)
    testbed.swap_out(exp.name)
    changed = experiment(LINE.replace("delay: 10ms", "delay: 20ms"), "line")  # same name
    testbed.define(changed)
    testbed.swap_in(exp.name, RunOptions(results=fake.state_root / "r3"))
    assert computed == [exp.name] and testbed.active(exp.name).plan == plan(changed)
    testbed.swap_out(exp.name)
