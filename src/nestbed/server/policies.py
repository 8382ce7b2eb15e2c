"""The shared testbed's policies wired into the server: ``admission`` and ``idle`` decide
(purely), this module tells them about the store and the machine and carries out what they
say.

**Admission.** A swap-in or a run is accepted only if the experiment's demand fits beside
every experiment that holds the machine (swapping in, active, swapping out) and every one
whose swap-in or run this server has accepted and not yet begun. The check and the
reservation of the operation happen under one lock, so two requests cannot both take the
last cores. A refusal is one sentence naming the resource the experiment lacks (409).

**Batch queue.** A policy of the server's loop: at every tick the entries whose run ended
are settled (``batch.finish``: done, or queued again to be retried after the wait, or failed),
the runs of entries cancelled while running are ended (swapped out, results kept), and the
next entry that fits (``batch.next_runnable``, with admission's answer) is started as a whole
run in a worker, cut at its project's maximum duration; ``batch.start`` and ``batch.end``
rows go to the audit log. The queue is a table of the store, so a restart forgets nothing:
an entry whose run the restart cut short counts as a failed attempt and is retried.

**Idle swap-out.** A policy of the server's loop: at every tick each active experiment
with no operation under way is sampled (``idle.ActiveSampler``) and judged
(``idle.judge``); a warning becomes an audit row ``idle.warn`` (the owner's event, shown by
``status``), a swap-out is started as the server's own operation (``idle.swapout``, then
``swapout.end``), its results kept. Each experiment is judged by its project's settings
(``settings.idle_settings``: the server's defaults where the project set none) and is exempt
while a leader's grant holds (``store.policies``). What ``judge`` remembers (idle since,
warned at) is saved in the store whenever it changes, so a restarted server carries on
from it instead of starting the idle time again; only its last sample is not kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.lifecycle import Testbed
from nestbed.model import Experiment
from nestbed.model.options import RunOptions
from nestbed.results.manifest import host_facts
from nestbed.server import batch, confinement
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
from nestbed.server.config import ServerConfig
from nestbed.server.idle import (
    Action,
    ActiveSampler,
    IdleSettings,
    IdleState,
    Sessions,
    idle_settings,
    judge,
)
from nestbed.server.operations import Operation, Operations
from nestbed.store import State, Store
from nestbed.store.accounts import users_text
from nestbed.store.policies import Policies
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
        self._demands: dict[str, tuple[bytes, Demand]] = {}  # by stored name, with its IR's hash
        unknown = [what for what, have in (("the link emulator's packet rate",
                   self.capacity.linkd_pps), ("the loopback bandwidth",
                   self.capacity.loopback_bps)) if have is None]  # fmt: skip
        if unknown:
            log.info("admission: %s not known (no linkd_pps or trivial_bps in --hosts), so "
                     "not checked", " and ".join(unknown))  # fmt: skip

    def decide(self, store: Store, stored: str) -> Decision:
        """Whether experiment ``stored`` fits now beside what holds the machine and the
        swap-ins and runs accepted and not begun (call under ``lock`` to act on it)."""
        pending = self.operations.running("swapin", "run")
        demands: dict[str, Demand] = {}
        for record in store.list():
            if record.name == stored or record.state in HOLDING or record.name in pending:
                demands[record.name] = self._demand(record.name, record.ir_json)
        mine = demands.pop(stored)
        return admit(stored, mine, self.capacity, demands.values(), self.policy)

    def _demand(self, stored: str, ir_json: str) -> Demand:
        """The demand of an experiment's IR, computed once per IR: reading the IR and the
        mapper's model of it costs milliseconds of the server's one interpreter, and every
        decision looks at every experiment that holds the machine."""
        key = hashlib.sha256(ir_json.encode()).digest()
        found = self._demands.get(stored)
        if found is None or found[0] != key:
            found = key, demand_of(Experiment.from_json(ir_json))
            self._demands[stored] = found
        return found[1]

    @contextmanager
    def admitted(self, store: Store, stored: str) -> Iterator[None]:
        """``NoRoom`` unless experiment ``stored`` fits now; the block runs under the lock,
        to reserve its operation."""
        with self.lock:
            decision = self.decide(store, stored)
            if not decision.fits:
                raise NoRoom(decision.reason)
            yield


def capacity_of(hosts_file: Path | None, hostname: str | None = None) -> HostFacts:
    """This machine's capacity: its measured cores and memory, and, given its description
    in a hosts.yaml (``mapper.hostsfile``), what that says (its only host, or the one named
    as this machine, ``hostname``)."""
    if hosts_file is None:
        return machine_capacity(host_facts())
    import socket

    from nestbed.mapper.hostsfile import parse_hosts

    try:
        text = hosts_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{hosts_file}: cannot be read ({exc.strerror}); check --hosts") from None
    hosts = parse_hosts(text, str(hosts_file)).hosts
    name = hostname or socket.gethostname()
    mine = hosts if len(hosts) == 1 else [h for h in hosts if h.name == name]
    if len(mine) != 1:
        raise UserError(
            f"{hosts_file}: describes {', '.join(h.name for h in hosts)}, none of them this "
            f"machine ({name}); give a hosts.yaml with one host, or one named {name}"
        )
    return machine_capacity(host_facts(), mine[0])


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
    fits (``batch.next_runnable``), as a run in a worker, results under the server's
    ``results_root``, confined as its project (``confinement``)."""

    def __init__(
        self, admission: Admission, config: ServerConfig, policy: BatchPolicy | None = None
    ) -> None:
        self.admission, self.config = admission, config
        self.policy = policy or BatchPolicy()
        self.idle = config.idle  # the server's defaults: a run's maximum duration
        self.started: dict[int, Operation] = {}  # entry id -> its run, in this server's life
        self.ending: set[int] = set()  # cancelled entries whose run was asked to end

    def __call__(self, loop: Loop) -> None:
        queue = BatchQueue(loop.testbed.store)
        self._settle(loop, queue)
        self._end_cancelled(loop, queue)
        self._start_next(loop, queue)

    def _end_cancelled(self, loop: Loop, queue: BatchQueue) -> None:
        """Ends the runs of entries cancelled while running: their controller is asked to
        finish the run as ``cancelled``, so the run's worker swaps the experiment out as
        after any end, its results kept. One still swapping in is ended at a later tick."""
        states = queue.states(sorted(self.started))
        for entry_id, op in sorted(self.started.items()):
            if states.get(entry_id, "cancelled") != "cancelled":
                continue
            if op.ended_at is not None:
                del self.started[entry_id]
                self.ending.discard(entry_id)
                owner = loop.accounts.owner(op.experiment)
                project, shown = (owner.project, owner.name) if owner else (None, op.experiment)
                loop.accounts.audit(op.actor, "batch.end", f"cancelled: entry {entry_id}, its "
                                    "run ended and swapped out, its results kept",
                                    project=project, experiment=shown)  # fmt: skip
                continue
            found = loop.testbed.store.find(op.experiment)
            if entry_id in self.ending or found is None or found.state != State.ACTIVE:
                continue
            try:
                live = loop.testbed.active(op.experiment)
                try:
                    live.request("finish", timeout=300, outcome="cancelled",
                                 reason=f"batch entry {entry_id} was cancelled")  # fmt: skip
                finally:
                    live.close()
            except (NestbedError, OSError) as exc:
                log.warning("batch: cannot end the run of cancelled entry %s: %s", entry_id, exc)
                continue
            self.ending.add(entry_id)

    def _settle(self, loop: Loop, queue: BatchQueue) -> None:
        for record in queue.entries(states=("running",)):
            op = self.started.get(record.id)
            if op is not None and op.ended_at is None:
                continue
            ok = op is not None and op.error is None
            reason = "" if ok else (op.error if op else "the server stopped during its run")
            reason = users_text(reason, record.project, record.experiment)
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
        # A batch run is an operation, which idle swap-out leaves alone: its project's
        # maximum duration cuts it instead.
        own = idle_settings(self.idle, Policies(loop.testbed.store).settings(record.project))
        try:
            options = confinement.run_options(
                loop.accounts, self.config, record.project, record.experiment,
                timeout_s=own.max_duration_s,
            )  # fmt: skip
        except BaseException:
            loop.operations.release(op)
            raise
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
        self.settings = settings  # the server's defaults; a project's own settings win
        self.sessions = sessions or Sessions()
        self.states: dict[str, IdleState] = {}
        self.saved: dict[str, dict[str, Any]] = {}  # what the store holds, less the sample

    def __call__(self, loop: Loop) -> None:
        store = loop.testbed.store
        policies = Policies(store)
        active = {r.name: r for r in store.list() if r.state == State.ACTIVE}
        for gone in set(self.states) - set(active):
            del self.states[gone]  # swapped out: a next swap-in starts afresh
        if set(self.saved) - set(active):
            policies.forget_idle_states(set(active))
            self.saved = {k: v for k, v in self.saved.items() if k in active}
        for name, record in sorted(active.items()):
            if loop.operations.busy(name):
                continue
            swapped_in_at_s = record.state_changed_at.timestamp()
            state = self.states.get(name) or self._restored(policies, name, swapped_in_at_s)
            try:
                live = loop.testbed.active(name)
                try:
                    sample = ActiveSampler(live, self.sessions).sample()
                finally:
                    live.close()
            except (NestbedError, OSError) as exc:
                log.warning("idle: cannot sample %s: %s", name, exc)
                continue
            owner = loop.accounts.owner(name)
            project, shown = (owner.project, owner.name) if owner else (None, name)
            settings = self.settings
            if project is not None:
                settings = idle_settings(self.settings, policies.settings(project))
            exempt = policies.exempt(name, datetime.now(UTC)) is not None
            self.states[name], verdict = judge(state, sample, settings, exempt=exempt)
            self._save(policies, name, self.states[name])
            if verdict.action is None:
                continue
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

    def _restored(self, policies: Policies, name: str, swapped_in_at_s: float) -> IdleState:
        """What the store remembers of ``name`` since its swap-in (a restarted server), less
        the last sample: counters compared across the restart's gap would average traffic
        over it, so idleness is judged from the next two samples on, idle since as before."""
        fresh = IdleState(swapped_in_at_s=swapped_in_at_s)
        text = policies.idle_state(name)
        if text is None:
            return fresh
        try:
            kept = IdleState.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError):
            log.warning("idle: the stored idle state of %s is unreadable; starting afresh", name)
            return fresh
        if kept.swapped_in_at_s != swapped_in_at_s:
            return fresh  # of an earlier swap-in
        self.saved[name] = _remembered(kept)
        return replace(kept, last=None)

    def _save(self, policies: Policies, name: str, state: IdleState) -> None:
        """Writes the state when what a restart needs (idle since, warned at) changed."""
        remembered = _remembered(state)
        if self.saved.get(name) != remembered:
            policies.save_idle_state(name, json.dumps(remembered))
            self.saved[name] = remembered


def _remembered(state: IdleState) -> dict[str, Any]:
    return {**state.to_dict(), "last": None}
