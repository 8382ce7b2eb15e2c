"""A host's ledger of the node slots its experiments' shares hold, so that experiments swapped
in side by side (several users of one cluster, a sweep's points in parallel) share its hosts
in space rather than overcommit them.

An agent reports its slots and those held (``agent.facts``); the controller places an
experiment's nodes in the slots left. Two swap-ins placed from the same facts could both
count on the same free slots, so a share takes its slots here, under the host's lock, as its
build begins, and is refused (``HostFull``) when others took them meanwhile: the controller
then removes what it built elsewhere and places again with fresh facts. A share gives its
slots back when it is removed. An entry whose share was never removed (its controller killed
between taking and building) is the experiment's leftover on this host, which ``nestbed
cleanup NAME`` removes with the rest.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from nestbed.backend import linux
from nestbed.backend.plan import experiment_tag
from nestbed.errors import EnvironmentProblem

LEDGER = ".cluster-slots"  # in the host's state folder: one entry per experiment, by tag

_lock = threading.Lock()  # one agent serves a host; its threads build shares side by side


class HostFull(EnvironmentProblem):
    """Other experiments took the slots a share was placed in."""


def _ledger() -> Path:
    return linux.RUN_DIR / LEDGER


def _entries() -> dict[str, tuple[str, int]]:
    """tag -> (experiment, slots) of every entry."""
    found = {}
    ledger = _ledger()
    for entry in sorted(ledger.iterdir()) if ledger.is_dir() else []:
        if entry.suffix:  # an entry being written
            continue
        try:
            kept = json.loads(entry.read_text())
            found[entry.name] = (str(kept["experiment"]), int(kept["slots"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half written: its share never began building
    return found


def held(besides: str | None = None) -> int:
    """The slots this host's experiments hold, ``besides``'s own excepted."""
    return sum(n for experiment, n in _entries().values() if experiment != besides)


def take(experiment: str, count: int, limit: int | None) -> None:
    """Holds ``count`` slots for the experiment's share, of this host's ``limit``; HostFull if
    the others hold too many to leave them (never without a limit)."""
    with _lock:
        others = held(besides=experiment)
        if limit is not None and others + count > limit:
            raise HostFull(
                f"other experiments took this host's slots meanwhile ({others} of {limit} "
                f"held; experiment {experiment} needs {count})"
            )
        ledger = _ledger()
        ledger.mkdir(parents=True, exist_ok=True, mode=0o700)
        entry = ledger / experiment_tag(experiment)
        partial = entry.with_suffix(".new")
        partial.write_text(json.dumps({"experiment": experiment, "slots": count}))
        partial.replace(entry)


def give_back(experiment: str) -> None:
    with _lock:
        (_ledger() / experiment_tag(experiment)).unlink(missing_ok=True)


def _held_by(experiment: str, n: int) -> str:
    return f"{n} node slot{'' if n == 1 else 's'} held by experiment {experiment}"


def leftovers_by_tag() -> dict[str, list[str]]:
    return {tag: [_held_by(experiment, n)] for tag, (experiment, n) in _entries().items()}


def remove_leftovers(tags: set[str]) -> list[str]:
    removed = []
    with _lock:
        for tag, (experiment, n) in _entries().items():
            if tag in tags:
                (_ledger() / tag).unlink(missing_ok=True)
                removed.append(_held_by(experiment, n))
    return removed
