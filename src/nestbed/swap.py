"""Swapping experiments in and out: the store's state machine around the back end and the
experiment's controller.

Every step is a state change in the store first (defined → swapping-in → active →
swapping-out → swapped, or failed), so a crash leaves a state that `cleanup` can finish, and
two racing swap-ins cannot both win (the store's compare-and-set decides). Every swap-in is a
run: its controller writes the results folder until swap-out ends the run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestbed.backend import linux
from nestbed.backend.plan import Plan, plan
from nestbed.control import client as control
from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.linktest.levels import Notify, check_level
from nestbed.model import Experiment
from nestbed.results import manifest
from nestbed.results.folder import make_folder
from nestbed.store import State, Store

RESULTS = Path("results")
_KEPT_IR = "ir.json"  # the IR a swap-in used, kept so swap-out undoes exactly that


@dataclass(frozen=True)
class Active:
    """What a swap-in made: the plan, the run's id and its results folder."""

    plan: Plan
    run_id: int
    results: Path
    linktest: Any = None  # the linktest.run.Report of the linktest at swap-in, if one was asked for


def swapped_in_experiment(store: Store, name: str) -> Experiment:
    """The experiment as it was swapped in (or as stored, when it is not)."""
    kept = linux.RUN_DIR / name / _KEPT_IR
    if kept.exists():
        return Experiment.from_json(kept.read_text())
    return Experiment.from_json(store.get(name).ir_json)


def experiment_plan(store: Store, name: str) -> Plan:
    """The plan of the experiment as it was swapped in (or as stored, when it is not)."""
    return plan(swapped_in_experiment(store, name))


def default_results(name: str) -> Path:
    return (RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()


def swap_in(
    store: Store,
    name: str,
    *,
    results: Path | None = None,
    capture: bool = False,
    linktest: int | None = None,
    linktest_strict: bool = False,
    progress: Notify | None = None,
    report: bool = True,
    cpumon: str | list[str] | None = None,
    cpumon_duty: float | None = None,
    capture_nodes: str | list[str] | None = None,
) -> Active:
    """Builds the experiment's network and starts its controller, which begins the run.

    With ``linktest`` a linktest of that level runs on the finished network before the run
    begins (its report in the results folder); with ``linktest_strict`` a failed check fails
    the swap-in. ``cpumon`` ("all", or node names) runs nestbed-cpumon in those nodes for the
    whole run, looping ``cpumon_duty`` of each second (nodes/cpu.csv in the results).
    ``capture_nodes`` limits ``capture`` to those nodes' ends of their links. On failure
    everything is removed and the experiment is `failed`.
    """
    linux.require_root()
    if linktest is not None:
        check_level(linktest)
    record = store.get(name)
    stored = Experiment.from_json(record.ir_json)
    if cpumon_duty is not None and not 0 < cpumon_duty <= 1:
        raise UserError(f"--cpumon-duty {cpumon_duty} is not a fraction in (0, 1]; write e.g. 0.1")
    monitored = named_nodes(stored, cpumon, "--cpumon")
    if monitored:
        linux.built_binary("nestbed-cpumon")  # a missing build is one sentence here
    captured = named_nodes(stored, capture_nodes, "--capture-nodes")
    store.transition(name, State.SWAPPING_IN, expect_from=record.state, reason="swapin")
    exp = stored
    p = plan(exp)
    folder = (results or default_results(name)).resolve()
    run_id = None
    try:
        linux.swap_in(p)
        kept = linux.run_dir(p) / _KEPT_IR
        kept.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        kept.write_text(exp.to_json())
        make_folder(folder)
        checked = None
        if linktest is not None:
            checked = _linktest(p, exp, linktest, folder, linktest_strict, progress)
        run_id = store.start_run(name, folder)
        control.launch(p, kept, folder, run_id, capture or bool(captured), report=report,
                       cpumon=monitored, cpumon_duty=cpumon_duty,
                       capture_nodes=captured)  # fmt: skip
    except BaseException as exc:
        reason = str(exc) if isinstance(exc, NestbedError) else f"{type(exc).__name__}: {exc}"
        if run_id is not None:
            store.end_run(run_id, "failed")
        store.transition(name, State.FAILED, reason=reason)
        # After the state: a teardown that fails too must not hide the first error (cleanup
        # finds what is left).
        with contextlib.suppress(Exception):
            linux.swap_out(p)
        raise
    store.transition(name, State.ACTIVE, expect_from=State.SWAPPING_IN)
    return Active(p, run_id, folder, checked)


def named_nodes(exp: Experiment, value: str | list[str] | None, option: str) -> tuple[str, ...]:
    """The nodes an option's value names: "all", or names (a list, or one string with
    commas); a UserError for a node the experiment lacks."""
    if not value:
        return ()
    names = [value] if isinstance(value, str) else list(value)
    wanted = [n.strip() for item in names for n in item.split(",") if n.strip()]
    if not wanted:
        raise UserError(f"{option} {','.join(names)!r} names no node; give node names or all")
    nodes = [n.name for n in exp.nodes]
    if "all" in wanted:
        return tuple(nodes)
    unknown = [n for n in wanted if n not in nodes]
    if unknown:
        raise UserError(
            f"experiment {exp.name} has no node '{unknown[0]}' for {option}; its nodes are "
            f"{', '.join(nodes)} (or write all)"
        )
    return tuple(dict.fromkeys(wanted))


def next_run(
    store: Store, name: str, exp: Experiment, results: Path, *, report: bool = True
) -> Active:
    """Ends the active run and starts another on the same network, with every pipe set to
    ``exp``'s shaping through linkd (a sweep's link-reuse mode: ``exp`` may differ from the
    swapped-in experiment in link shaping only)."""
    record = store.get(name)
    if record.state != State.ACTIVE:
        raise UserError(f"experiment {name} is {record.state}, not active; swap it in first")
    before = experiment_plan(store, name)
    p = plan(exp)
    if p.nodes != before.nodes or p.veths != before.veths or p.bridges != before.bridges:
        raise UserError(
            f"the next run of {name} changes more than link shaping; run it as its own experiment"
        )
    runs_before = len(store.runs(name))
    end_run(store, name, before, "completed", "the next run of a sweep", stop=False)
    client = linux.linkd(p)
    try:
        for old, new in zip(before.emulated, p.emulated, strict=True):
            linux.set_changed_pipes(client, new.link, old.settings(), new.settings())
    finally:
        client.close()
    kept = linux.run_dir(p) / _KEPT_IR
    kept.write_text(exp.to_json())
    folder = results.resolve()
    make_folder(folder)
    run_id = store.start_run(name, folder)
    try:
        # The controller process stays; it starts the new run itself (no new process).
        control.request(p, "next_run", ir=str(kept), results=str(folder), run_id=run_id,
                        reused=runs_before, report=report)  # fmt: skip
    except BaseException:
        store.end_run(run_id, "failed")
        raise
    return Active(p, run_id, folder)


def run_linktest(p: Plan, exp: Experiment, level: int, progress: Notify | None) -> Any:
    # Imported here: linktest's statistics (scipy) take a second to import.
    from nestbed.linktest.run import linktest

    return linktest(p, exp, level, progress=progress)


def _linktest(
    p: Plan, exp: Experiment, level: int, folder: Path, strict: bool, progress: Notify | None
) -> Any:
    from nestbed.linktest.run import write as write_linktest

    report = run_linktest(p, exp, level, progress)
    where = write_linktest(report, folder)
    if strict and report.failures:
        first = report.failures[0]
        raise EnvironmentProblem(
            f"linktest level {level} found {len(report.failures)} failed checks (first: "
            f"{first.link} {first.direction}: {first.reason}); the experiment was swapped out; "
            f"the report is {where / 'linktest.md'}"
        )
    return report


def end_run(
    store: Store, name: str, p: Plan, outcome: str, reason: str | None, *, stop: bool = True
) -> str:
    """Asks the controller to end the run and (with ``stop``) to exit; returns the run's
    outcome.

    A controller that is gone (crashed, killed) cannot write its tables; the manifest then
    says so and keeps everything measured until then.
    """
    open_runs = [r for r in store.runs(name) if r.ended_at is None]
    final = outcome
    try:
        ended = control.request(p, "finish", timeout=300, outcome=outcome, reason=reason)
        final = ended.get("outcome", outcome)
        if stop:
            with contextlib.suppress(NestbedError, OSError):
                control.request(p, "shutdown", timeout=10)
    except (NestbedError, OSError) as exc:
        final = "failed"
        for run in open_runs:
            folder = Path(run.results_dir)
            with contextlib.suppress(OSError, ValueError):
                manifest.end(folder, "failed", f"the controller was lost ({exc})", None)
                _report(folder)
    for run in open_runs:
        store.end_run(run.id, final)
    return final


def _report(folder: Path) -> None:
    from nestbed.results.report import write_report

    with contextlib.suppress(Exception):
        write_report(folder)


def define_anew(
    store: Store,
    exp: Experiment,
    *,
    source_text: str = "",
    source_format: str = "python",
    source_file: str | None = None,
) -> None:
    """Stores EXP under its name afresh: an earlier attempt that crashed may have left it
    defined, or even active (then it is swapped out as failed first)."""
    with contextlib.suppress(NestbedError):
        record = store.get(exp.name)
        if record.state not in (State.DEFINED, State.SWAPPED):
            swap_out(store, exp.name, outcome="failed")
        store.delete(exp.name)
    store.create_experiment(exp.name, source_text=source_text, source_format=source_format,
                            source_file=source_file, ir_json=exp.to_json())  # fmt: skip


def swap_out(store: Store, name: str, *, outcome: str = "completed") -> None:
    """Ends the run and tears the network down (also after a failed or interrupted swap-in)."""
    linux.require_root()
    record = store.get(name)
    if record.state in (State.DEFINED, State.SWAPPED):
        raise UserError(f"experiment {name} is {record.state}, not active; nothing to swap out")
    store.transition(name, State.SWAPPING_OUT, expect_from=record.state, reason="swapout")
    p = experiment_plan(store, name)
    try:
        end_run(store, name, p, outcome, "swapped out")
        linux.swap_out(p)
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
            p = experiment_plan(store, record.name)
            end_run(store, record.name, p, "failed", "cleaned up")
            linux.swap_out(p)
            store.transition(record.name, State.SWAPPED, reason="cleaned up")
            settled.append(record.name)
    return settled, linux.cleanup()


@contextlib.contextmanager
def swapped_in(store: Store, name: str, **options: object) -> Iterator[Active]:
    """`with swapped_in(store, name) as active:` — swapped out when the block ends, however."""
    active = swap_in(store, name, **options)  # type: ignore[arg-type]
    try:
        yield active
    finally:
        swap_out(store, name)
