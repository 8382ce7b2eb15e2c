"""Swapping experiments in and out: the store's state machine around the back end.

Every step is a state change in the store first (defined → swapping-in → active →
swapping-out → swapped, or failed), so a crash leaves a state that `cleanup` can finish, and
two racing swap-ins cannot both win (the store's compare-and-set decides).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from nestbed.backend import linux
from nestbed.backend.plan import Plan, plan
from nestbed.errors import NestbedError
from nestbed.model import Experiment
from nestbed.store import State, Store


def experiment_plan(store: Store, name: str) -> Plan:
    return plan(Experiment.from_json(store.get(name).ir_json))


def swap_in(store: Store, name: str) -> Plan:
    """Builds the experiment's network; on failure everything is removed and it is `failed`."""
    linux.require_root()
    record = store.get(name)
    store.transition(name, State.SWAPPING_IN, expect_from=record.state, reason="swapin")
    p = experiment_plan(store, name)
    try:
        linux.swap_in(p)
    except BaseException as exc:
        reason = str(exc) if isinstance(exc, NestbedError) else f"{type(exc).__name__}: {exc}"
        store.transition(name, State.FAILED, reason=reason)
        raise
    store.transition(name, State.ACTIVE, expect_from=State.SWAPPING_IN)
    return p


def swap_out(store: Store, name: str) -> None:
    """Tears the experiment's network down (also after a failed or interrupted swap-in)."""
    linux.require_root()
    record = store.get(name)
    store.transition(name, State.SWAPPING_OUT, expect_from=record.state, reason="swapout")
    try:
        linux.swap_out(experiment_plan(store, name))
    except BaseException as exc:
        store.transition(name, State.FAILED, reason=f"swap-out failed: {exc}")
        raise
    store.transition(name, State.SWAPPED, expect_from=State.SWAPPING_OUT)


def cleanup(store: Store) -> tuple[list[str], list[str]]:
    """Removes what any experiment left behind and settles every unfinished state.

    Returns the experiments it settled and the namespaces it removed that no stored
    experiment accounted for (for example from another store).
    """
    linux.require_root()
    settled = []
    for record in store.list():
        if record.state in (State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT):
            store.transition(record.name, State.FAILED, reason="cleaned up")
        if store.get(record.name).state == State.FAILED:
            linux.swap_out(experiment_plan(store, record.name))
            store.transition(record.name, State.SWAPPED, reason="cleaned up")
            settled.append(record.name)
    return settled, linux.cleanup()


@contextlib.contextmanager
def swapped_in(store: Store, name: str) -> Iterator[Plan]:
    """`with swapped_in(store, name) as plan:` — swapped out when the block ends, however."""
    p = swap_in(store, name)
    try:
        yield p
    finally:
        swap_out(store, name)
