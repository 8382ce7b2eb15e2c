"""The life cycle of an experiment: its states, the one table of allowed moves, and the messages.

    defined ──> swapping-in ──> active ──> swapping-out ──> swapped ──> swapping-in …
                     │              │             │
                     └──────────────┴─────────────┴──> failed ──> swapping-out (cleanup)
                                                              └─> swapped

``TRANSITIONS`` is the only place the allowed moves are written down; everything else asks it.
This module does no I/O.
"""

from __future__ import annotations

from enum import StrEnum

from nestbed.errors import UserError


class State(StrEnum):
    """Where an experiment is in its life cycle; the value is what the database stores."""

    DEFINED = "defined"
    SWAPPING_IN = "swapping-in"
    ACTIVE = "active"
    SWAPPING_OUT = "swapping-out"
    SWAPPED = "swapped"
    FAILED = "failed"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.DEFINED: frozenset({State.SWAPPING_IN}),
    State.SWAPPING_IN: frozenset({State.ACTIVE, State.FAILED}),
    State.ACTIVE: frozenset({State.SWAPPING_OUT, State.FAILED}),
    State.SWAPPING_OUT: frozenset({State.SWAPPED, State.FAILED}),
    State.SWAPPED: frozenset({State.SWAPPING_IN}),
    State.FAILED: frozenset({State.SWAPPING_OUT, State.SWAPPED}),
}
"""For each state, the states an experiment may move to from it."""

DELETABLE: frozenset[State] = frozenset({State.DEFINED, State.SWAPPED, State.FAILED})
"""States in which an experiment may be deleted."""

EDITABLE: frozenset[State] = frozenset({State.DEFINED, State.SWAPPED, State.FAILED})
"""States in which an experiment's definition (source and IR) may be replaced."""

_WHAT_TO_DO: dict[State, str] = {
    State.DEFINED: "swap it in first with `nestbed swapin {name}`",
    State.SWAPPING_IN: "wait for the swap-in to finish and check it with `nestbed show {name}`",
    State.ACTIVE: "swap it out first with `nestbed swapout {name}`",
    State.SWAPPING_OUT: "wait for the swap-out to finish and check it with `nestbed show {name}`",
    State.SWAPPED: "swap it in again with `nestbed swapin {name}`",
    State.FAILED: "clean it up first with `nestbed swapout {name}`",
}


def what_to_do(name: str, current: State) -> str:
    """The advice for an experiment that is in ``current`` and cannot do what was asked."""
    return _WHAT_TO_DO[current].format(name=name)


def check_transition(
    name: str, current: State, to: State, expect_from: State | None = None
) -> None:
    """Raise ``UserError`` unless experiment ``name`` may move from ``current`` to ``to``."""
    if expect_from is not None and current != expect_from:
        raise UserError(
            f"experiment {name!r} is {current}, not {expect_from}, so it cannot become {to}; "
            f"{what_to_do(name, current)}"
        )
    allowed = TRANSITIONS[current]
    if to not in allowed:
        raise UserError(
            f"experiment {name!r} is {current} and cannot become {to} "
            f"(from {current} it can only become {_or_list(allowed)}); "
            f"{what_to_do(name, current)}"
        )


def _or_list(states: frozenset[State]) -> str:
    ordered = [s.value for s in State if s in states]
    if len(ordered) == 1:
        return ordered[0]
    return ", ".join(ordered[:-1]) + " or " + ordered[-1]
