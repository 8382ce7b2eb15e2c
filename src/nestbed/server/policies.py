"""The shared testbed's policies wired into the server: ``admission`` and ``idle`` decide
(purely), this module tells them about the store and the machine and carries out what they
say.

**Admission.** A swap-in or a run is accepted only if the experiment's demand fits beside
every experiment that holds the machine (swapping in, active, swapping out) and every one
whose swap-in or run this server has accepted and not yet begun. The check and the
reservation of the operation happen under one lock, so two requests cannot both take the
last cores. A refusal is one sentence naming the resource the experiment lacks (409).

**Batch queue.** A policy of the server's loop: at every tick the entries whose run ended
are settled (``batch.finish``: done, or queued again to be retried after the wait, or failed)
and the next entry that fits (``batch.next_runnable``, with admission's answer) is started
as a whole run in a worker; ``batch.start`` and ``batch.end`` rows go to the audit log. The
queue is a table of the store, so a restart forgets nothing: an entry whose run the restart
cut short counts as a failed attempt and is retried.

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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.lifecycle import Testbed
from nestbed.model import Experiment
from nestbed.model.options import RunOptions
from nestbed.results.manifest import host_facts
from nestbed.server import batch
from nestbed.server.admission import (
    AdmissionPolicy,
    Decision,
    Demand,
    HostFacts,
    admit,
    demand_of,
    machine_capacity,
)
from nestbed.server.batch import BatchEntry, BatchPolicy, BatchState
from nestbed.server.idle import Action, ActiveSampler, IdleSettings, IdleState, Sessions, judge
from nestbed.server.operations import Operation, Operations
from nestbed.store import State, Store
from nestbed.store.queue import BatchQueue, seconds
from nestbed.store.records import BatchRecord

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
        self,
        operations: Operations,
        capacity: HostFacts | None = None,
        policy: AdmissionPolicy | None = None,
    ) -> None:
        self.operations = operations
        self.capacity = capacity or machine_capacity(host_facts())
        self.policy = policy or AdmissionPolicy()
        self.lock = threading.Lock()

    def decide(self, store: Store, stored: str) -> Decision:
        """Whether experiment ``stored`` fits now beside what holds the machine and the
        swap-ins and runs accepted and not begun (call under ``lock`` to act on it)."""
        pending = self.operations.running("swapin", "run")
        demands: dict[str, Demand] = {}
        for record in store.list():
            if record.name == stored or record.state in HOLDING or record.name in pending:
                demands[record.name] = demand_of(Experiment.from_json(record.ir_json))
        mine = demands.pop(stored)
        return admit(stored, mine, self.capacity, demands.values(), self.policy)

    @contextmanager
    def admitted(self, store: Store, stored: str) -> Iterator[None]:
        """``NoRoom`` unless experiment ``stored`` fits now; the block runs under the lock,
        to reserve its operation."""
        with self.lock:
            decision = self.decide(store, stored)
            if not decision.fits:
                raise NoRoom(decision.reason)
            yield


def whole_run(testbed: Testbed, stored: str, options: RunOptions) -> None:
    """One run of experiment ``stored`` (swap in, run, swap out); an error unless it
    completed or halted, so the operation says it failed."""
    from nestbed.lifecycle.runs import run

    summary = run(testbed, stored, options)
    if summary.get("outcome") not in ("completed", "halted"):
        raise EnvironmentProblem(
            f"the run of experiment {stored} ended {summary.get('outcome')}; its results are "
            f"in {summary.get('results')}"
        )


class BatchRunner:
    """The loop's batch policy: settles entries whose run ended, then starts the next that
    fits (``batch.next_runnable``), as a run in a worker, results under ``results_root``."""

    def __init__(
        self, admission: Admission, results_root: Path, policy: BatchPolicy | None = None
    ) -> None:
        self.admission, self.results_root = admission, results_root
        self.policy = policy or BatchPolicy()
        self.started: dict[int, Operation] = {}  # entry id -> its run, in this server's life

    def __call__(self, loop: Loop) -> None:
        queue = BatchQueue(loop.testbed.store)
        self._settle(loop, queue)
        self._start_next(loop, queue)

    def _settle(self, loop: Loop, queue: BatchQueue) -> None:
        for record in queue.entries(states=("running",)):
            op = self.started.get(record.id)
            if op is not None and op.ended_at is None:
                continue
            ok = op is not None and op.error is None
            reason = "" if ok else (op.error if op else "the server stopped during its run")
            ended = batch.finish(_entry(record), time.time(), ok=ok, reason=reason or "",
                                 policy=self.policy)  # fmt: skip
            queue.save(record.id, "running", state=str(ended.state),
                       last_failure_at=_at(ended.last_failure_at_s),
                       last_failure=ended.last_failure)  # fmt: skip
            self.started.pop(record.id, None)
            loop.accounts.audit(record.submitted_by, "batch.end", f"{ended.state}: entry "
                                f"{record.id}{', ' + reason if reason else ''}",
                                project=record.project, experiment=record.experiment)  # fmt: skip

    def _start_next(self, loop: Loop, queue: BatchQueue) -> None:
        records = {r.id: r for r in queue.entries(states=("queued",))}
        if not records:
            return
        store = loop.testbed.store
        with self.admission.lock:

            def fits(entry: BatchEntry) -> bool:
                stored = records[entry.id].stored_name
                found = store.find(stored)
                if found is None or found.state not in (State.DEFINED, State.SWAPPED):
                    return False
                if loop.operations.busy(stored):
                    return False
                return self.admission.decide(store, stored).fits

            pick = batch.next_runnable([_entry(r) for r in records.values()], time.time(),
                                       fits, self.policy)  # fmt: skip
            for bumped in pick.passed_over:
                queue.save(bumped.id, "queued", passed_over=bumped.passed_over)
            if pick.entry is None:
                return
            record = records[pick.entry.id]
            op = loop.operations.reserve(Operation("run", record.stored_name,
                                                   record.submitted_by))  # fmt: skip
        started = batch.start(pick.entry)
        try:
            queue.save(record.id, "queued", state=str(started.state), attempts=started.attempts,
                       passed_over=0)  # fmt: skip
            loop.accounts.audit(record.submitted_by, "batch.start", f"entry {record.id}, "
                                f"attempt {started.attempts}", project=record.project,
                                experiment=record.experiment)  # fmt: skip
        except BaseException:
            loop.operations.release(op)
            raise
        stamp = time.strftime("%Y%m%d-%H%M%S")
        options = RunOptions(results=self.results_root / record.project /
                             f"{record.experiment}-{stamp}")  # fmt: skip
        self.started[record.id] = op
        loop.operations.launch(op, lambda: whole_run(loop.testbed, record.stored_name, options))


def _entry(record: BatchRecord) -> BatchEntry:
    return BatchEntry(
        id=record.id, experiment=record.experiment, project=record.project,
        submitted_at_s=record.submitted_at.timestamp(), priority=record.priority,
        state=BatchState(record.state), attempts=record.attempts,
        last_failure_at_s=seconds(record.last_failure_at), last_failure=record.last_failure,
        passed_over=record.passed_over,
    )  # fmt: skip


def _at(seconds_: float | None) -> datetime | None:
    return None if seconds_ is None else datetime.fromtimestamp(seconds_, UTC)


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
