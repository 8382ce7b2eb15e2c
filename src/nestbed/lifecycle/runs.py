"""Whole runs: swap in, let the controller work until the run is over, collect, swap out."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from nestbed.errors import EnvironmentProblem, NestbedError
from nestbed.lifecycle import signals
from nestbed.lifecycle.active import POLL_S, Active
from nestbed.lifecycle.testbed import Testbed
from nestbed.model import Experiment
from nestbed.model.options import RunOptions
from nestbed.results import manifest
from nestbed.store import State

FULL_BYTES = 64 * 1024  # less free than this: no table row or manifest can be written


class RunCut(EnvironmentProblem):
    """The machine cannot carry the run on: its link emulator died, its disk is full."""


def expected_end(exp: Experiment) -> float | None:
    """When the file's static events end: `$ns halt`, else the last event (None: no events)."""
    halts = [e.time_s for e in exp.events if e.object == "ns" and e.verb in ("halt", "terminate")]
    if halts:
        return min(halts)
    return max((e.time_s for e in exp.events), default=None)


def run(
    testbed: Testbed, name: str, options: RunOptions | None = None, progress: Console | None = None
) -> dict[str, Any]:
    """One whole run; returns the results' summary (with the folder under ``results``).

    The run ends at `$ns halt`, after ``options.duration_s``, or, without a duration, when the
    static events are done and no program or sequence is still running. Ctrl-C, SIGTERM or
    SIGHUP end it as ``interrupted (SIGTERM)``, keeping what was measured, and the interrupt
    goes on up (as ``signals.Interrupted`` carrying the summary) once the experiment is swapped
    out, so that a sweep or a study stops too. With ``options.keep`` the experiment stays
    active.
    """
    options = options or RunOptions()
    active: Active | None = None
    outcome, stop = "completed", None
    try:
        # In the try: an interrupt that comes after the swap-in made the experiment active,
        # but before it returned, must swap it out too.
        active = testbed.swap_in(name, options, progress.log if progress else None)
        _load_in_background("nestbed.results.report")  # the summary's tables need pandas
        wait(active, options, progress)
    except KeyboardInterrupt as exc:
        outcome, stop = signals.outcome(exc), exc
        if active is None and not _left_active(testbed, name):
            raise  # the swap-in rolled itself back
    except RunCut as exc:
        outcome = "failed"
        # The controller keeps what it measured and says why in the manifest.
        with contextlib.suppress(NestbedError, OSError):
            active.request("finish", timeout=300, outcome=outcome, reason=str(exc))
    finally:
        # A signal during the teardown waits for its end; after an interrupt it is dropped
        # (the program stops anyway), otherwise it stops the program then.
        if active is None and _left_active(testbed, name):
            active = testbed.active(name)
        if active is not None:
            with signals.deferred(deliver=stop is None):
                if options.keep:
                    active.request("finish", timeout=300, outcome=outcome, reason=None)
                else:
                    testbed.swap_out(name, outcome=outcome)
    assert active is not None and active.results is not None
    _check_written(active.results)
    from nestbed.results.report import summary

    found = {**summary(active.results), "results": str(active.results), "kept": options.keep}
    if active.linktest is not None:
        found["linktest"] = {k: v for k, v in active.linktest.to_json().items() if k != "checks"}
    if stop is not None:
        raise signals.Interrupted(signals.signum_of(stop), found) from None
    return found


def _load_in_background(module: str) -> None:
    """Imports ``module`` on a thread of its own: pandas takes a second or more to load, which
    the run's time hides where the end of the run would wait for it (importing the module
    later waits for this import to finish, never imports it twice)."""
    threading.Thread(target=importlib.import_module, args=(module,), daemon=True).start()


def _left_active(testbed: Testbed, name: str) -> bool:
    """Whether a swap-in that did not return left the experiment active."""
    record = testbed.store.find(name)
    return record is not None and record.state == State.ACTIVE


def _check_written(folder: Path) -> None:
    """One sentence when the run's end could not be written (a full disk, most often): its
    manifest then still says `running`, so nothing there passes for a complete run."""
    try:
        ended = manifest.read(folder).get("outcome")
    except (OSError, ValueError):
        return  # no manifest: nothing passes for a run (the summary says so)
    if ended != "running":
        return
    why = "its file system is full" if _full(folder) else "it could not be written"
    raise EnvironmentProblem(
        f"the run's results in {folder} are incomplete: {why}; the network was swapped out "
        "and the manifest still says `running`, so free space (or give another --results) "
        "and run it again"
    )


def _full(folder: Path) -> bool:
    try:
        disk = os.statvfs(folder)
    except OSError:
        return False
    return disk.f_bavail * disk.f_frsize < FULL_BYTES


def wait(active: Active, options: RunOptions, console: Console | None = None) -> None:
    """Until the run is over: finished, ``duration_s`` reached, or (without a duration) its
    events and programs done; ``timeout_s`` cuts a run that would go on longer."""
    duration = options.duration_s
    end = duration or expected_end(active.experiment)
    columns = [TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, disable=console is None, transient=True) as bar:
        task = bar.add_task(f"running {active.name}", total=end)
        while True:
            signals.check()  # a stop passed on to this thread (a parallel sweep's points)
            status = active.request("status")
            elapsed = status["elapsed_s"]
            bar.update(task, completed=min(elapsed, end) if end else elapsed)
            if status["finished"]:
                break
            if active.results is not None and _full(active.results):
                raise RunCut(
                    f"the file system of the results folder {active.results} is full; the "
                    f"run ended as failed after {elapsed:.1f} s"
                )
            if not status.get("link_counters") and active.link_emulator_gone():
                raise RunCut(
                    f"nestbed-linkd of experiment {active.name} exited during the run, so its "
                    f"links stopped forwarding; the run ended as failed after "
                    f"{elapsed:.1f} s, keeping what it measured until then"
                )
            if duration is not None and elapsed >= duration:
                break
            if duration is None and not status["busy"]:
                break
            if options.timeout_s is not None and elapsed >= options.timeout_s:
                break
            time.sleep(POLL_S)


def wait_and_end(testbed: Testbed, active: Active, options: RunOptions) -> str:
    """Waits for a run as `run` does, then ends it, keeping the network; its outcome."""
    wait(active, options)
    return testbed.end_run(active.name, active, "completed", None, stop=False)


def run_alone(
    store_path: Path, exp: Experiment, options: RunOptions, **source: Any
) -> dict[str, Any]:
    """An instrument's run: ``exp`` defined afresh in a store of its own (at ``store_path``)
    and run once on the default back end; ``source`` as ``Testbed.define`` takes it."""
    from nestbed.backend import get as get_backend
    from nestbed.store import Store

    with Store.open(str(store_path)) as store:
        testbed = Testbed(store, get_backend())
        testbed.define(exp, anew=True, **source)
        return run(testbed, exp.name, options)
