"""Concurrent state changes: of several connections racing to swap one experiment in, exactly
one wins, on both backends."""

from __future__ import annotations

import threading
import time

import pytest

from nestbed.errors import NestbedError, UserError
from nestbed.store import ExperimentRecord, State, Store
from nestbed.store import experiments as experiments_module

RACERS = 4
ROUNDS = 3
HOLD_S = 0.05
"""How long the winner holds the row after reading it, so that the others surely collide."""


def race(stores: list[Store], name: str) -> list[object]:
    """Every store tries ``defined → swapping-in`` at the same moment; what each got.

    A racer that died of anything but a ``NestbedError`` leaves None, which fails the test.
    """
    barrier = threading.Barrier(len(stores))
    outcomes: list[object] = [None] * len(stores)

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = stores[i].transition(
                name, State.SWAPPING_IN, expect_from=State.DEFINED, reason=f"racer {i}"
            )
        except NestbedError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    return outcomes


def test_racing_swapins_exactly_one_wins(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_check = experiments_module.check_transition

    def slow_check(*args: object, **kwargs: object) -> None:
        time.sleep(HOLD_S)
        real_check(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(experiments_module, "check_transition", slow_check)
    stores = [Store.open(db_url) for _ in range(RACERS)]
    try:
        for round_ in range(ROUNDS):
            name = f"race-{round_}"
            stores[0].create_experiment(
                name, source_text="", source_format="ns", source_file=None, ir_json="{}"
            )
            outcomes = race(stores, name)

            winners = [o for o in outcomes if isinstance(o, ExperimentRecord)]
            losers = [o for o in outcomes if isinstance(o, NestbedError)]
            assert len(winners) == 1, outcomes
            assert len(losers) == RACERS - 1
            for loser in losers:
                assert isinstance(loser, UserError), repr(loser)
                assert str(loser) == (
                    f"experiment '{name}' is swapping-in, not defined, so it cannot become "
                    f"swapping-in; wait for the swap-in to finish and check it with "
                    f"`nestbed show {name}`"
                )
            swapins = [c for c in stores[1].history(name) if c.to_state is State.SWAPPING_IN]
            assert len(swapins) == 1
            assert stores[1].get(name).state is State.SWAPPING_IN
    finally:
        for store in stores:
            store.close()
