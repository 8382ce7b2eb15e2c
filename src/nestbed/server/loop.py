"""The server's one background loop and what it does when the server starts.

``reconcile`` runs once, before the API answers: the store is the truth, so every
experiment it says is live (swapping in, active, swapping out, failed) is looked at with
the life cycle's own cleanup, one experiment at a time. One whose controller still lives
(the server restarted, its controllers did not) is spared and stays active; one whose
controller is gone is settled (swapped out as failed, what it measured kept), exactly as
``nestbed cleanup NAME`` would. Nothing is forgotten and nothing of another tag is touched.

``Loop.tick`` is the seam for the shared testbed's policies (issue 22): admission control
(an experiment's demand against what the machine has left), the batch queue (which queued
experiment runs next, the wait after a failure) and idle swap-out. ``Loop.run`` calls
``tick`` every ``tick_s`` seconds in a worker thread (it may use the store and the
back end, which block); a tick that raises is logged and the next one runs as usual. A
policy added here gets the server's ``Testbed``, ``Accounts`` and ``Operations`` through
the ``Loop`` and starts its long work with ``Operations.start``, so it is audited and
never overlaps a user's operation on the same experiment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from nestbed.errors import NestbedError
from nestbed.lifecycle import Testbed
from nestbed.server.operations import Operations
from nestbed.store import State
from nestbed.store.accounts import Accounts

log = logging.getLogger("nestbed.server")

_LIVE = (State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT, State.FAILED)

Policy = Callable[["Loop"], None]


def reconcile(testbed: Testbed, accounts: Accounts) -> dict[str, list[str]]:
    """Settles live experiments whose owner is gone, spares those whose controller lives;
    every settled one is audited. Returns the stored names of both."""
    found: dict[str, list[str]] = {"settled": [], "spared": []}
    for record in testbed.store.list():
        if record.state not in _LIVE:
            continue
        try:
            done = testbed.cleanup(record.name)
        except NestbedError as exc:
            log.error("reconciling %s failed: %s", record.name, exc)
            _audit(accounts, record.name, f"failed: {exc}")
            continue
        found["settled"] += done.settled
        found["spared"] += [n for n in done.spared if not n.startswith("tag ")]
        for name in done.settled:
            _audit(accounts, name, "settled: its controller was gone, swapped out as failed")
    return found


def _audit(accounts: Accounts, stored: str, outcome: str) -> None:
    owner = accounts.owner(stored)
    project, name = (owner.project, owner.name) if owner else (None, stored)
    accounts.audit(None, "reconcile", outcome, project=project, experiment=name)


@dataclass
class Loop:
    """The background loop of one server: ``tick`` every ``tick_s`` seconds."""

    testbed: Testbed
    accounts: Accounts
    operations: Operations
    tick_s: float
    policies: tuple[Policy, ...] = ()
    ticks: int = 0

    def tick(self) -> None:
        """One round of the shared testbed's policies (admission, batch queue, idle
        swap-out), in order; each gets this loop. Without policies it only counts."""
        for policy in self.policies:
            policy(self)
        self.ticks += 1

    async def run(self) -> None:
        """Ticks until cancelled (the server's shutdown)."""
        while True:
            try:
                await asyncio.to_thread(self.tick)
            except Exception:  # a policy's bug must not stop the server's other work
                log.exception("a tick of the server's loop failed")
            await asyncio.sleep(self.tick_s)
