"""The shared testbed's policies wired into the server: ``admission`` and ``idle`` decide
(purely), this module tells them about the store and the machine and carries out what they
say. (The batch queue, ``batch``, is not wired yet: it needs its own table and API.)

**Admission.** A swap-in or a run is accepted only if the experiment's demand fits beside
every experiment that holds the machine (swapping in, active, swapping out) and every one
whose swap-in or run this server has accepted and not yet begun. The check and the
reservation of the operation happen under one lock, so two requests cannot both take the
last cores. A refusal is one sentence naming the resource the experiment lacks (409).

**Idle swap-out.** A policy of the server's loop: at every tick each active experiment
with no operation under way is sampled (``idle.ActiveSampler``) and judged
(``idle.judge``); a warning becomes an audit row ``idle.warn`` (the owner's event, shown by
``status``), a swap-out is started as the server's own operation (``idle.swapout``, then
``swapout.end``), its results kept. What ``judge`` remembers lives in memory: after a
restart an experiment's idle time starts again from its next sample (its maximum duration
still counts from its swap-in, which the store keeps).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from nestbed.errors import NestbedError, UserError
from nestbed.model import Experiment
from nestbed.results.manifest import host_facts
from nestbed.server.admission import (
    AdmissionPolicy,
    Demand,
    HostFacts,
    admit,
    demand_of,
    machine_capacity,
)
from nestbed.server.idle import Action, ActiveSampler, IdleSettings, IdleState, Sessions, judge
from nestbed.server.operations import Operation
from nestbed.store import State, Store

if TYPE_CHECKING:
    from nestbed.server.loop import Loop

log = logging.getLogger("nestbed.server")

HOLDING = (State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT)
"""States in which an experiment holds the machine's resources."""


class NoRoom(UserError):
    """The machine has not what an experiment needs (now, or at all)."""


class Admission:
    """Admission control of one server, against this machine's capacity."""

    def __init__(
        self, capacity: HostFacts | None = None, policy: AdmissionPolicy | None = None
    ) -> None:
        self.capacity = capacity or machine_capacity(host_facts())
        self.policy = policy or AdmissionPolicy()
        self.lock = threading.Lock()

    @contextmanager
    def admitted(
        self, store: Store, stored: str, starting: Callable[[], set[str]]
    ) -> Iterator[None]:
        """``NoRoom`` unless experiment ``stored`` fits beside what holds the machine and the
        experiments ``starting()`` names (accepted, not begun); the block runs under the
        lock, to reserve the operation."""
        with self.lock:
            pending = starting()
            demands: dict[str, Demand] = {}
            for record in store.list():
                if record.name == stored or record.state in HOLDING or record.name in pending:
                    demands[record.name] = demand_of(Experiment.from_json(record.ir_json))
            mine = demands.pop(stored)
            decision = admit(stored, mine, self.capacity, demands.values(), self.policy)
            if not decision.fits:
                raise NoRoom(decision.reason)
            yield


class IdleSwapOut:
    """The loop's idle policy (module docstring)."""

    def __init__(self, settings: IdleSettings, sessions: Sessions | None = None) -> None:
        self.settings = settings
        self.sessions = sessions or Sessions()
        self.states: dict[str, IdleState] = {}

    def __call__(self, loop: Loop) -> None:
        active = {r.name: r for r in loop.testbed.store.list() if r.state == State.ACTIVE}
        for gone in set(self.states) - set(active):
            del self.states[gone]  # swapped out: a next swap-in starts afresh
        for name, record in sorted(active.items()):
            if loop.operations.busy(name):
                continue
            state = self.states.get(name) or IdleState(
                swapped_in_at_s=record.state_changed_at.timestamp()
            )
            try:
                live = loop.testbed.active(name)
                try:
                    sample = ActiveSampler(live, self.sessions).sample()
                finally:
                    live.close()
            except (NestbedError, OSError) as exc:
                log.warning("idle: cannot sample %s: %s", name, exc)
                continue
            self.states[name], verdict = judge(state, sample, self.settings)
            if verdict.action is None:
                continue
            owner = loop.accounts.owner(name)
            project, shown = (owner.project, owner.name) if owner else (None, name)
            if verdict.action is Action.WARN:
                loop.accounts.audit(None, "idle.warn", f"experiment {shown}: {verdict.reason}",
                                    project=project, experiment=shown)  # fmt: skip
                continue
            try:
                op = loop.operations.reserve(Operation("swapout", name, None))
            except UserError as exc:  # a user's operation began meanwhile
                log.info("idle: %s not swapped out: %s", name, exc)
                continue
            said = f"experiment {shown}: {verdict.reason}"
            try:
                loop.accounts.audit(None, "idle.swapout", said, project=project, experiment=shown)
            except BaseException:
                loop.operations.release(op)
                raise
            loop.operations.launch(op, lambda n=name: loop.testbed.swap_out(n))
