"""Runs of experiments: swap in, let the controller work until the run is over, collect, swap
out; and the helpers every command on an active experiment shares."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from nestbed.backend import linux
from nestbed.backend.plan import Plan
from nestbed.control import client as control
from nestbed.errors import UserError
from nestbed.linktest.expect import with_links
from nestbed.linktest.levels import Notify, check_level
from nestbed.model import Experiment, Link
from nestbed.results.report import summary
from nestbed.store import State, Store
from nestbed.swap import (
    Active,
    end_run,
    experiment_plan,
    swap_in,
    swap_out,
    swapped_in_experiment,
)

_POLL_S = 0.05  # a status request costs well under a millisecond


def active_plan(store: Store, name: str) -> Plan:
    """The plan of an experiment that must be active (a one-sentence error otherwise)."""
    record = store.get(name)
    if record.state != State.ACTIVE:
        raise UserError(
            f"experiment '{name}' is {record.state}, not active; swap it in first with "
            f"`nestbed swapin {name}`"
        )
    return experiment_plan(store, name)


def linktest_active(
    store: Store, name: str, level: int, progress: Notify | None = None
) -> tuple[Any, Path | None]:
    """Runs linktest on an active experiment, against its links as events have left them;
    the report goes into the run's results folder (returned) as well."""
    from nestbed.linktest.run import linktest, set_aside, write

    check_level(level)
    p = active_plan(store, name)
    before = _link_settings(p)
    changed = [Link.model_validate(x) for x in before["changed_links"]]
    down = {link for link, state in before["links"].items() if state == "down"}
    exp = with_links(swapped_in_experiment(store, name), changed)
    report = linktest(p, exp, level, down=down, progress=progress)
    after = _link_settings(p)
    set_aside(report, _differ(before, after))
    folder = write(report, Path(after["results"])) if after.get("results") else None
    return report, folder


def _link_settings(p: Plan) -> dict[str, Any]:
    status = control.request(p, "status")
    return {k: status.get(k) or {} for k in ("links", "changed_links", "results")}


def _differ(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Links whose state or settings differ between two statuses."""
    names = {n for n in before["links"] if before["links"][n] != after["links"].get(n)}
    settings = [{x["name"]: x for x in s["changed_links"]} for s in (before, after)]
    return names | {n for n in settings[0].keys() | settings[1].keys()
                    if settings[0].get(n) != settings[1].get(n)}  # fmt: skip


def expected_end(exp: Experiment) -> float | None:
    """When the file's static events end: `$ns halt`, else the last event (None: no events)."""
    halts = [e.time_s for e in exp.events if e.object == "ns" and e.verb in ("halt", "terminate")]
    if halts:
        return min(halts)
    return max((e.time_s for e in exp.events), default=None)


def run_experiment(
    store: Store,
    name: str,
    *,
    duration: float | None = None,
    capture: bool = False,
    keep: bool = False,
    results: Path | None = None,
    progress: Console | None = None,
    linktest: int | None = None,
    linktest_strict: bool = False,
    report: bool = True,
    timeout: float | None = None,
    cpumon: str | list[str] | None = None,
    cpumon_duty: float | None = None,
    capture_nodes: str | list[str] | None = None,
) -> dict[str, Any]:
    """One whole run; returns the results' summary (with the folder under ``results``).

    The run ends at `$ns halt`, after ``duration`` seconds, or, without a duration, when the
    static events are done and no program or sequence is still running. Ctrl-C ends it as
    interrupted, keeping what was measured. ``cpumon``, ``cpumon_duty`` and
    ``capture_nodes`` as in `swap.swap_in`.
    """
    exp = Experiment.from_json(store.get(name).ir_json)
    active = swap_in(
        store, name, results=results, capture=capture, linktest=linktest,
        linktest_strict=linktest_strict, progress=progress.log if progress else None,
        report=report, cpumon=cpumon, cpumon_duty=cpumon_duty, capture_nodes=capture_nodes,
    )  # fmt: skip
    outcome = "completed"
    try:
        _wait(active.plan, duration, duration or expected_end(exp), progress, timeout)
    except KeyboardInterrupt:
        outcome = "interrupted"
    finally:
        if keep:
            control.request(active.plan, "finish", timeout=300, outcome=outcome, reason=None)
        else:
            swap_out(store, name, outcome=outcome)
    found = {**summary(active.results), "results": str(active.results), "kept": keep}
    if active.linktest is not None:
        found["linktest"] = {k: v for k, v in active.linktest.to_json().items() if k != "checks"}
    return found


def wait_for_run(
    store: Store, name: str, active: Active, duration: float | None, timeout: float | None
) -> str:
    """Waits for a run as `run_experiment` does, then ends it, keeping the network; returns
    its outcome."""
    exp = Experiment.from_json(store.get(name).ir_json)
    _wait(active.plan, duration, duration or expected_end(exp), None, timeout)
    return end_run(store, name, active.plan, "completed", None, stop=False)


def _wait(
    p: Plan,
    duration: float | None,
    end: float | None,
    console: Console | None,
    timeout: float | None = None,
) -> None:
    """Until the run is over: finished, ``duration`` reached, or (without a duration) its
    events and programs done; ``timeout`` cuts a run that would go on longer."""
    columns = [TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, disable=console is None, transient=True) as bar:
        task = bar.add_task(f"running {p.experiment}", total=end)
        while True:
            status = control.request(p, "status")
            elapsed = status["elapsed_s"]
            bar.update(task, completed=min(elapsed, end) if end else elapsed)
            if status["finished"]:
                break
            if duration is not None and elapsed >= duration:
                break
            if duration is None and not status["busy"]:
                break
            if timeout is not None and elapsed >= timeout:
                break
            time.sleep(_POLL_S)


def capture_link(p: Plan, link: str, folder: Path, duration: float | None) -> list[Path]:
    """tcpdump at every member's end of a link or LAN until ``duration`` or Ctrl-C."""
    ends = {node: ifname for (name, node), ifname in p.interfaces().items() if name == link}
    if not ends:
        links = sorted({name for name, _ in p.interfaces()})
        raise UserError(
            f"experiment {p.experiment} has no link '{link}'; its links are {', '.join(links)}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    files, processes = [], []
    for node, ifname in sorted(ends.items()):
        path = (folder / f"{link}-{node}.pcap").resolve()
        argv = linux.capture_argv(ifname, path)
        processes.append(linux.start_in(p, node, argv, stderr=subprocess.DEVNULL))
        files.append(path)
    try:
        if duration is None:
            while all(proc.poll() is None for proc in processes):
                time.sleep(_POLL_S)
        else:
            time.sleep(duration)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in processes:
            proc.send_signal(signal.SIGINT)
            proc.wait()
    return files
