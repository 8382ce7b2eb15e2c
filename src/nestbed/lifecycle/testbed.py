"""The experiment life cycle: the store's state machine around a back end and the
experiment's controller. ``Testbed(store, backend)`` is the one place where experiments are
defined, swapped in, given their next run, swapped out and cleaned up.

Every step is a state change in the store first (defined → swapping-in → active →
swapping-out → swapped, or failed), so a crash leaves a state that cleanup can finish, and
two racing swap-ins cannot both win (the store's compare-and-set decides). Every swap-in is a
run: its controller writes the results folder until swap-out ends the run. Who still owns an
experiment on the machine is decided by locks (``lifecycle.locks``), never by the store.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed.backend import kept
from nestbed.backend.base import Backend
from nestbed.backend.plan import Plan, experiment_tag, plan
from nestbed.control.client import ControllerClient
from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.lifecycle import locks, signals
from nestbed.lifecycle.active import Active
from nestbed.store import State
from nestbed.store.states import check_transition

_LIVE = (State.SWAPPING_IN, State.ACTIVE, State.SWAPPING_OUT, State.FAILED)
if TYPE_CHECKING:
    # The IR's models (pydantic) load where an experiment is read or a run's options made,
    # not for a swap-out, which needs the plan swap-in kept.
    from nestbed.model import Experiment
    from nestbed.model.options import RunOptions
    from nestbed.store import Store

Notify = Any  # a callable taking one line of progress, or None


@dataclass
class Cleaned:
    """What a cleanup did: experiments settled, leftovers removed, live ones spared."""

    settled: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)


class Testbed:
    """Experiments in a store, living on a back end."""

    __test__ = False  # not a test class, whatever pytest makes of its name

    def __init__(self, store: Store, backend: Backend):
        self.store, self.backend = store, backend

    # -- definitions ------------------------------------------------------------------------

    def define(
        self,
        exp: Experiment,
        *,
        source_text: str = "",
        source_format: str = "python",
        source_file: str | None = None,
        anew: bool = False,
    ) -> str:
        """Stores ``exp`` under its name: created, or its definition replaced. With ``anew``
        an earlier attempt that crashed is settled first (swapped out as failed, deleted)."""
        fields = dict(source_text=source_text, source_format=source_format,
                      source_file=source_file, ir_json=exp.to_json())  # fmt: skip
        record = self.store.find(exp.name)
        if anew and record is not None:
            if record.state not in (State.DEFINED, State.SWAPPED):
                with contextlib.suppress(NestbedError):
                    self.swap_out(exp.name, outcome="failed")
            self.store.delete(exp.name)
            record = None
        if record is None:
            self.store.create_experiment(exp.name, **fields)  # type: ignore[arg-type]
        else:
            self.store.update_ir(exp.name, **fields)  # type: ignore[arg-type]
        return exp.name

    def define_file(self, path: Path, parameters: dict[str, str] | None = None) -> str:
        """Parses an experiment file and defines it (created or refreshed); its name."""
        from nestbed.spec import load

        loaded = load(path, parameters=parameters or {})
        return self.define(loaded.experiment, source_text=loaded.text,
                           source_format=loaded.format, source_file=str(path))  # fmt: skip

    def experiment(self, name: str) -> Experiment:
        """The experiment as it was swapped in (or as stored, when it is not)."""
        from nestbed.model import Experiment

        swapped_in = self.backend.state_root / name / kept.IR
        if swapped_in.exists():
            return Experiment.from_json(swapped_in.read_text())
        return Experiment.from_json(self.store.get(name).ir_json)

    def plan(self, name: str) -> Plan:
        """The plan swap-in carried out (kept, read without the IR's models), or as computed
        from the stored experiment when it is not swapped in."""
        found = kept.plan_of(self.backend.state_root / name)
        return found if found is not None else self._kept(name)[1]

    def _kept(self, name: str) -> tuple[Experiment, Plan]:
        """The experiment as it was swapped in and the plan carried out (kept by swap-in, so
        not computed again), or as stored when it is not swapped in."""
        from nestbed.model import Experiment

        found = kept.load(self.backend.state_root / name)
        if found is not None:
            return found
        exp = Experiment.from_json(self.store.get(name).ir_json)
        return exp, plan(exp)

    def active(self, name: str) -> Active:
        """The experiment, which must be active (one sentence saying what to do otherwise)."""
        record = self.store.get(name)
        if record.state != State.ACTIVE:
            raise UserError(
                f"experiment '{name}' is {record.state}, not active; swap it in first with "
                f"`nestbed swapin {name}`"
            )
        kept_plan = kept.plan_of(self.backend.state_root / name)
        if kept_plan is not None:  # the experiment is read from beside it when asked for
            p, exp = kept_plan, functools.partial(self._swapped_in, name)
        else:
            exp, p = self._kept(name)
        runs = self.store.runs(name, open_only=True)
        results = Path(runs[-1].results_dir) if runs else None
        run_id = runs[-1].id if runs else None
        return Active(name, p, exp, self.backend, results, run_id)

    def _swapped_in(self, name: str) -> Experiment:
        from nestbed.model import Experiment

        return Experiment.from_json((self.backend.state_root / name / kept.IR).read_text())

    # -- swap in ----------------------------------------------------------------------------

    def swap_in(
        self, name: str, options: RunOptions | None = None, progress: Notify = None
    ) -> Active:
        """Builds the experiment's network and starts its controller, which begins the run.

        With ``options.linktest`` a linktest of that level runs on the finished network
        before the run begins (its report in the results folder); with ``linktest_strict``
        a failed check fails the swap-in. On failure everything is removed and the
        experiment is `failed`. An interrupt (Ctrl-C, SIGTERM) either rolls the swap-in back
        or, arriving once the experiment is `active` (while the locks are let go), leaves it
        active for the caller to swap out: see `runs.run`.
        """
        from nestbed.model import Experiment
        from nestbed.model.options import ControllerStart, RunOptions
        from nestbed.results.folder import RunFolder, default_results

        self.backend.require_ready()
        record = self.store.get(name)
        exp = Experiment.from_json(record.ir_json)
        options = (options or RunOptions()).for_experiment(exp)
        if options.cpumon:
            from nestbed.binaries import built_binary

            built_binary("nestbed-cpumon")  # a missing build is one sentence here
        folder = (options.results or default_results(name)).resolve()
        options = options.model_copy(update={"results": folder})
        # The store's word first: "active, swap it out first" says more than a held lock.
        check_transition(name, record.state, State.SWAPPING_IN)
        root = self.backend.state_root
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with locks.machine(root, shared=True), locks.ExperimentLock(root, name) as lock:
            self.store.transition(name, State.SWAPPING_IN, expect_from=record.state,
                                  reason="swapin")  # fmt: skip
            p = kept.cached_plan(root, record.ir_json, exp)
            active = Active(name, p, exp, self.backend, folder)
            try:
                assert lock.fd is not None
                # The controller's process loads its modules while the network is built.
                active.controller.prestart(pass_fds=(lock.fd,))
                self.backend.swap_in(p)
                ir = kept.keep(self.backend.run_dir(p), exp, p)
                RunFolder(folder).make()
                if options.linktest is not None:
                    active.linktest = self._linktest(active, options, progress)
                active.run_id = self.store.start_run(name, folder)
                start = ControllerStart(backend=self.backend.name, ir=ir, results=folder,
                                        run_id=active.run_id, options=options)  # fmt: skip
                active.controller.launch(start, pass_fds=(lock.fd,))
                # Inside: an interrupt while the state is written still rolls back.
                self.store.transition(name, State.ACTIVE, expect_from=State.SWAPPING_IN)
            except BaseException as exc:
                active.controller.abandon()
                self._failed(name, p, active.run_id, exc)
                raise
        return active

    def _failed(self, name: str, p: Plan, run_id: int | None, exc: BaseException) -> None:
        reason = str(exc) if isinstance(exc, NestbedError) else f"{type(exc).__name__}: {exc}"
        outcome = signals.outcome(exc) if isinstance(exc, KeyboardInterrupt) else "failed"
        with signals.deferred():  # a second signal must not cut the rollback short
            if run_id is not None:
                # The controller is up: it ends the run's manifest with what stopped it.
                with contextlib.suppress(Exception), ControllerClient(self.backend, p) as client:
                    client.request("finish", timeout=60, outcome=outcome, reason=reason)
                self.store.end_run(run_id, outcome)
            self.store.transition(name, State.FAILED, reason=reason)
            # After the state: a teardown that fails too must not hide the first error
            # (cleanup finds what is left).
            with contextlib.suppress(Exception):
                self.backend.swap_out(p)

    def _linktest(self, active: Active, options: RunOptions, progress: Notify) -> Any:
        from nestbed.linktest.run import linktest, write

        assert options.linktest is not None and options.results is not None
        report = linktest(active.plan, active.experiment, options.linktest, progress=progress,
                          backend=self.backend)  # fmt: skip
        where = write(report, options.results)
        if options.linktest_strict and report.failures:
            first = report.failures[0]
            raise EnvironmentProblem(
                f"linktest level {options.linktest} found {len(report.failures)} failed checks "
                f"(first: {first.link} {first.direction}: {first.reason}); the experiment was "
                f"swapped out; the report is {where / 'linktest.md'}"
            )
        return report

    # -- runs -------------------------------------------------------------------------------

    def next_run(self, name: str, exp: Experiment, options: RunOptions | None = None) -> Active:
        """Ends the active run and starts another on the same network, with every pipe set to
        ``exp``'s shaping through linkd (a sweep's link-reuse mode: ``exp`` may differ from
        the swapped-in experiment in link shaping only). The new run keeps ``options``."""
        from nestbed.backend.linkd import set_changed_pipes
        from nestbed.model.options import ControllerStart, RunOptions
        from nestbed.results.folder import RunFolder, default_results

        active = self.active(name)
        before = active.plan
        p = plan(exp)
        if p.nodes != before.nodes or p.veths != before.veths or p.bridges != before.bridges:
            raise UserError(
                f"the next run of {name} changes more than link shaping; run it as its own "
                "experiment"
            )
        options = (options or RunOptions()).for_experiment(exp)
        folder = (options.results or default_results(name)).resolve()
        options = options.model_copy(update={"results": folder})
        runs_before = len(self.store.runs(name))
        self.end_run(name, active, "completed", "the next run of a sweep", stop=False)
        client = self.backend.linkd(p)
        try:
            for old, new in zip(before.emulated, p.emulated, strict=True):
                set_changed_pipes(client, new.link, old.settings(), new.settings())
        finally:
            client.close()
        ir = kept.keep(self.backend.run_dir(p), exp, p)
        RunFolder(folder).make()
        run_id = self.store.start_run(name, folder)
        start = ControllerStart(
            backend=self.backend.name, ir=ir, results=folder, run_id=run_id,
            reused_runs=runs_before, options=options,
        )  # fmt: skip
        try:
            # The controller process stays; it starts the new run itself (no new process).
            active.controller.next_run(start)
        except BaseException:
            self.store.end_run(run_id, "failed")
            raise
        return Active(name, p, exp, self.backend, folder, run_id)

    def end_run(
        self,
        name: str,
        active: Active | ControllerClient,
        outcome: str,
        reason: str | None,
        *,
        stop: bool = True,
    ) -> str:
        """Asks the controller to end the run and (with ``stop``) to exit; the run's outcome.

        A controller that is gone (crashed, killed) cannot write its tables; the manifest then
        says so and keeps everything measured until then.
        """
        open_runs = self.store.runs(name, open_only=True)
        final = outcome
        try:
            ended = active.request("finish", timeout=300, outcome=outcome, reason=reason)
            final = ended.get("outcome", outcome)
            if stop:
                with contextlib.suppress(NestbedError, OSError):
                    active.request("shutdown", timeout=10)
        except (NestbedError, OSError) as exc:
            from nestbed.results import manifest
            from nestbed.results.drawing import draw_detached

            final = "failed"
            for run in open_runs:
                folder = Path(run.results_dir)
                with contextlib.suppress(OSError, ValueError):
                    manifest.end(folder, "failed", f"the controller was lost ({exc})", None)
                    draw_detached(folder)
        finally:
            active.close()
        for run in open_runs:
            self.store.end_run(run.id, final)
        return final

    # -- swap out ---------------------------------------------------------------------------

    def swap_out(self, name: str, *, outcome: str = "completed") -> None:
        """Ends the run and tears the network down (also after a failed or interrupted
        swap-in)."""
        self.backend.require_ready()
        record = self.store.get(name)
        if record.state in (State.DEFINED, State.SWAPPED):
            raise UserError(f"experiment {name} is {record.state}, not active; nothing to swap out")
        root = self.backend.state_root
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Signals wait for the teardown: half a swap-out would leave what cleanup must find.
        with signals.deferred(), locks.machine(root, shared=True):
            self.store.transition(name, State.SWAPPING_OUT, expect_from=record.state,
                                  reason="swapout")  # fmt: skip
            self._tear_down(name, outcome, "swapped out")

    def _tear_down(self, name: str, outcome: str, reason: str) -> None:
        p = self.plan(name)
        try:
            self.end_run(name, ControllerClient(self.backend, p), outcome, reason)
            self.backend.swap_out(p)
        except BaseException as exc:
            self.store.transition(name, State.FAILED, reason=f"swap-out failed: {exc}")
            raise
        self.store.transition(name, State.SWAPPED, expect_from=State.SWAPPING_OUT)

    # -- cleanup ----------------------------------------------------------------------------

    def cleanup(self, name: str | None = None, *, everything: bool = False) -> Cleaned:
        """Removes what experiments left behind with no living owner (no controller, no
        swap-in or swap-out in progress) and settles their states; an experiment whose owner
        lives is spared. ``name``: only that experiment. ``everything``: owners or not."""
        self.backend.require_ready()
        root = self.backend.state_root
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        done = Cleaned()
        with signals.deferred(), locks.machine(root, shared=False):
            left = self.backend.leftovers()
            # What an experiment of another store left (a sweep's, an instrument's, one whose
            # folder is gone) is found by its name's tag; a name nothing is known of is a typo.
            unknown = name is not None and self.store.find(name) is None
            if unknown and experiment_tag(name) not in left:
                self.store.get(name)  # one sentence for an unknown experiment
            handled = set()
            for record in self.store.list():
                tag = experiment_tag(record.name)
                if (name and record.name != name) or record.state not in _LIVE:
                    continue
                handled.add(tag)
                # Under the machine's lock no swap-in or swap-out is under way: one the store
                # says is was killed, and its controller, if it lives, is an orphan.
                midway = record.state in (State.SWAPPING_IN, State.SWAPPING_OUT)
                if not everything and not midway and locks.owned(root, tag):
                    done.spared.append(record.name)
                    continue
                if record.state != State.FAILED:
                    self.store.transition(record.name, State.FAILED, reason="cleaned up")
                self.store.transition(record.name, State.SWAPPING_OUT, reason="cleanup")
                self._tear_down(record.name, "failed", "cleaned up")
                done.settled.append(record.name)
            wanted = {experiment_tag(name)} if name else set(left)
            orphans = {tag for tag in wanted - handled if tag in left
                       and (everything or not locks.owned(root, tag))}  # fmt: skip
            done.spared += sorted(f"tag {t}" for t in wanted - handled - orphans if t in left)
            done.removed = self.backend.remove_leftovers(orphans) if orphans else []
        return done
