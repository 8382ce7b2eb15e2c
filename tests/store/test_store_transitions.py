"""The experiment life cycle: the table of allowed moves, its messages, and its audit trail."""

from __future__ import annotations

import itertools

import pytest

from nestbed.errors import UserError
from nestbed.store import TRANSITIONS, State, Store
from nestbed.store import experiments as experiments_module

# The life cycle as the design states it, written out independently of TRANSITIONS.
SPECIFIED = {
    ("defined", "swapping-in"),
    ("swapping-in", "active"),
    ("active", "swapping-out"),
    ("swapping-out", "swapped"),
    ("swapped", "swapping-in"),
    ("swapping-in", "failed"),
    ("active", "failed"),
    ("swapping-out", "failed"),
    ("failed", "swapping-out"),
    ("failed", "swapped"),
}

# The shortest way from a new experiment to each state.
PATH_TO = {
    State.DEFINED: [],
    State.SWAPPING_IN: [State.SWAPPING_IN],
    State.ACTIVE: [State.SWAPPING_IN, State.ACTIVE],
    State.SWAPPING_OUT: [State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT],
    State.SWAPPED: [State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT, State.SWAPPED],
    State.FAILED: [State.SWAPPING_IN, State.FAILED],
}


def new_experiment_in(store: Store, state: State, name: str = "dumbbell") -> None:
    store.create_experiment(
        name, source_text="", source_format="python", source_file=None, ir_json="{}"
    )
    for step in PATH_TO[state]:
        store.transition(name, step)


def test_transition_table_is_the_specified_life_cycle() -> None:
    table = {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == SPECIFIED
    assert set(TRANSITIONS) == set(State)


@pytest.mark.parametrize(("current", "to"), list(itertools.product(State, State)))
def test_every_pair_is_allowed_exactly_when_specified(
    store: Store, current: State, to: State
) -> None:
    new_experiment_in(store, current)
    before = store.history("dumbbell")
    if (current.value, to.value) in SPECIFIED:
        record = store.transition("dumbbell", to, reason="test")
        assert record.state is to
        assert store.get("dumbbell").state is to
        assert len(store.history("dumbbell")) == len(before) + 1
    else:
        with pytest.raises(UserError, match=f"^experiment 'dumbbell' is {current} and cannot"):
            store.transition("dumbbell", to)
        assert store.get("dumbbell").state is current
        assert store.history("dumbbell") == before


def test_illegal_transition_names_state_allowed_moves_and_fix(store: Store) -> None:
    new_experiment_in(store, State.ACTIVE)
    with pytest.raises(UserError) as caught:
        store.transition("dumbbell", State.SWAPPING_IN)
    assert str(caught.value) == (
        "experiment 'dumbbell' is active and cannot become swapping-in "
        "(from active it can only become swapping-out or failed); "
        "swap it out first with `nestbed swapout dumbbell`"
    )


def test_illegal_transition_from_defined(store: Store) -> None:
    new_experiment_in(store, State.DEFINED)
    with pytest.raises(UserError) as caught:
        store.transition("dumbbell", State.SWAPPING_OUT)
    assert str(caught.value) == (
        "experiment 'dumbbell' is defined and cannot become swapping-out "
        "(from defined it can only become swapping-in); "
        "swap it in first with `nestbed swapin dumbbell`"
    )


def test_expect_from_mismatch_is_refused_even_if_the_move_is_legal(store: Store) -> None:
    new_experiment_in(store, State.FAILED)
    with pytest.raises(UserError) as caught:
        store.transition("dumbbell", State.SWAPPING_OUT, expect_from=State.ACTIVE)
    assert str(caught.value) == (
        "experiment 'dumbbell' is failed, not active, so it cannot become swapping-out; "
        "clean it up first with `nestbed swapout dumbbell`"
    )
    assert store.get("dumbbell").state is State.FAILED


def test_expect_from_match_moves(store: Store) -> None:
    new_experiment_in(store, State.ACTIVE)
    record = store.transition("dumbbell", State.SWAPPING_OUT, expect_from=State.ACTIVE)
    assert record.state is State.SWAPPING_OUT


def test_transition_of_unknown_experiment(store: Store) -> None:
    with pytest.raises(UserError) as caught:
        store.transition("ghost", State.SWAPPING_IN)
    assert str(caught.value) == (
        "there is no experiment named 'ghost'; see the experiments with `nestbed list`"
    )


def test_history_records_every_change_with_reason_in_order(store: Store) -> None:
    created = store.create_experiment(
        "dumbbell", source_text="", source_format="yaml", source_file="d.yaml", ir_json="{}"
    )
    steps = [
        (State.SWAPPING_IN, "swapin by alice"),
        (State.FAILED, "veth h1-eth0 exists"),
        (State.SWAPPING_OUT, "cleanup"),
        (State.SWAPPED, None),
        (State.SWAPPING_IN, "retry"),
    ]
    records = [store.transition("dumbbell", to, reason=why) for to, why in steps]

    history = store.history("dumbbell")
    assert [(c.from_state, c.to_state, c.reason) for c in history] == [
        (None, State.DEFINED, "created"),
        (State.DEFINED, State.SWAPPING_IN, "swapin by alice"),
        (State.SWAPPING_IN, State.FAILED, "veth h1-eth0 exists"),
        (State.FAILED, State.SWAPPING_OUT, "cleanup"),
        (State.SWAPPING_OUT, State.SWAPPED, None),
        (State.SWAPPED, State.SWAPPING_IN, "retry"),
    ]
    assert {c.experiment for c in history} == {"dumbbell"}
    assert history[0].at == created.created_at
    assert [c.at for c in history[1:]] == [r.state_changed_at for r in records]
    assert [c.at for c in history] == sorted(c.at for c in history)


def test_failure_reason_is_kept_as_error_until_the_next_swapin(store: Store) -> None:
    new_experiment_in(store, State.SWAPPING_IN)
    failed = store.transition("dumbbell", State.FAILED, reason="tc qdisc add failed")
    assert failed.error == "tc qdisc add failed"
    swapped = store.transition("dumbbell", State.SWAPPED, reason="cleaned up")
    assert swapped.error == "tc qdisc add failed"
    again = store.transition("dumbbell", State.SWAPPING_IN)
    assert again.error is None


def test_state_and_audit_row_are_written_in_one_transaction(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_experiment_in(store, State.DEFINED)
    before = store.history("dumbbell")

    def broken_audit(*args: object, **kwargs: object) -> None:
        raise RuntimeError("audit write failed")

    monkeypatch.setattr(experiments_module, "_record_change", broken_audit)
    with pytest.raises(RuntimeError, match="audit write failed"):
        store.transition("dumbbell", State.SWAPPING_IN)
    monkeypatch.undo()
    assert store.get("dumbbell").state is State.DEFINED
    assert store.history("dumbbell") == before
