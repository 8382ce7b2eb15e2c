"""Running a sweep: each point a whole run (or, when only links change, one network reused
with its links reset between points), side by side when the machine allows, on a Dask cluster
when given one; every finished point is recorded at once, so a sweep resumes where it
stopped."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestbed.backend import get as get_backend
from nestbed.errors import Held, NestbedError, UserError
from nestbed.lifecycle import Testbed, signals
from nestbed.model import Experiment
from nestbed.model.options import RunOptions
from nestbed.results import manifest
from nestbed.results.folder import make_folder
from nestbed.spec import load
from nestbed.spec.resolve import derive_name
from nestbed.store import State, Store
from nestbed.sweep.metrics import metrics
from nestbed.sweep.spec import Point, Sweep, expand

DESCRIPTION = "sweep.json"
LOG = "points.jsonl"  # one line per finished point, appended as each finishes


@dataclass
class Progress:
    """What the sweep tells its caller: ``update`` with (finished, total, last row) as points
    finish, ``note`` with a sentence about the sweep as a whole (a link reuse not possible)."""

    update: Callable[[int, int, dict[str, Any]], None] = lambda done, total, row: None
    note: Callable[[str], None] = lambda text: None


def run_sweep(
    sweep: Sweep,
    folder: Path,
    *,
    parallel: int = 1,
    cluster: str | None = None,
    max_points: int | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Runs every point not yet recorded in ``folder`` (so an interrupted sweep resumes) and
    returns all rows, finished earlier or now."""
    points = expand(sweep, max_points) if max_points else expand(sweep)
    _check_parameters(sweep, points)  # before the folder is claimed by this sweep
    make_folder(folder)
    _check_same_sweep(sweep, points, folder)
    done = {row["point"]: row for row in read_rows(folder)}
    todo = [p for p in points if p.key not in done]
    report, note = (progress or Progress()).update, (progress or Progress()).note
    finished = len(points) - len(todo)
    store_url = str(folder / "store.db")
    _settle_leftovers(store_url)
    rows = list(done.values())
    record = _Recorder(folder)

    def finish(row: dict[str, Any]) -> None:
        nonlocal finished
        record(row)
        rows.append(row)
        finished += 1
        report(finished, len(points), row)

    if not todo:
        return rows
    if sweep.doc.reuse_links and cluster is not None:
        note("link reuse is not used on a cluster: each point is a whole run there")
    elif sweep.doc.reuse_links:
        reused, why = _reusable(sweep, todo)
        if reused is not None:
            for row in _run_reusing(sweep, todo, reused, folder, store_url):
                finish(row)
            return rows
        note(f"link reuse is not possible: {why}; each point is a whole run")
    if cluster is not None:
        for row in _run_on_cluster(sweep, todo, folder, cluster):
            finish(row)
        return rows
    if parallel <= 1:
        # In this thread, so that Ctrl-C reaches the running point at once: it ends as
        # interrupted, is swapped out and not recorded (a pool thread would run it to its end).
        for point in todo:
            finish(run_point(sweep, point, folder, store_url))
        return rows
    try:
        _run_in_pool(sweep, todo, folder, store_url, parallel, finish)
    finally:
        signals.carry_on()  # after the pool's threads are done, stopped or not
    return rows


def _run_in_pool(
    sweep: Sweep,
    todo: list[Point],
    folder: Path,
    store_url: str,
    parallel: int,
    finish: Callable[[dict[str, Any]], None],
) -> None:
    """Up to ``parallel`` points at once. A point that finds what it needs held (``Held``: a
    cluster's slots) while others of the sweep run waits until one of them ends, and then
    goes first; no new point starts meanwhile. Held when none of the sweep runs, other
    experiments hold it: the point fails, saying so."""
    queue = deque(todo)
    waiting: list[tuple[Point, dict[str, Any]]] = []  # held, with the row that says so
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        running: dict[Future[tuple[dict[str, Any], bool]], Point] = {}
        try:
            while queue or running:
                while queue and not waiting and len(running) < parallel:
                    point = queue.popleft()
                    running[pool.submit(_attempt, sweep, point, folder, store_url)] = point
                ready, _ = wait(running, return_when=FIRST_COMPLETED)
                freed = False  # a point that held something ended
                for future in ready:
                    point = running.pop(future)
                    row, held = future.result()
                    if held and (running or freed):
                        waiting.append((point, row))
                        continue
                    finish(row)
                    freed = freed or not held
                if freed:
                    queue.extendleft(reversed([point for point, _ in waiting]))
                elif not running:  # the sweep's points are done, and it is still held
                    for _, row in waiting:
                        finish(row)
                if freed or not running:
                    waiting.clear()
        except KeyboardInterrupt as exc:
            # Points still running end as interrupted at once (their runs swap out) and are
            # not recorded, so a resumed sweep runs them again.
            signals.stop_everywhere(signals.signum_of(exc))
            for future in running:
                future.cancel()
            raise


def run_point(sweep: Sweep, point: Point, folder: Path, store_url: str) -> dict[str, Any]:
    """One whole run of one point; never raises for a failure of the point itself."""
    return _attempt(sweep, point, folder, store_url)[0]


def _attempt(
    sweep: Sweep, point: Point, folder: Path, store_url: str
) -> tuple[dict[str, Any], bool]:
    """``run_point``'s row, and whether the point failed only because what it needs is held."""
    from nestbed.lifecycle.runs import run_alone

    name = point_name(sweep, point)
    started = time.monotonic()
    results = folder / "runs" / point.key
    row = _row(point, results)
    held = False
    try:
        exp = load(sweep.experiment, name=name, parameters=point.parameters).experiment
        doc = sweep.doc
        options = RunOptions.make(duration_s=doc.duration, timeout_s=doc.timeout,
                                  results=results, report=doc.run_reports)  # fmt: skip
        summary = run_alone(Path(store_url), exp, options)
        row["outcome"] = summary["outcome"]
        row["reason"] = summary.get("reason")
        if _cut(doc.duration, doc.timeout, summary.get("duration_s")):
            row["outcome"], row["reason"] = "timeout", f"still running after {doc.timeout} s"
    except KeyboardInterrupt:
        raise
    except NestbedError as exc:
        row["outcome"], row["reason"] = "failed", str(exc)
        held = isinstance(exc, Held)
    except Exception as exc:  # a bug, but the other points go on
        row["outcome"], row["reason"] = "failed", f"{type(exc).__name__}: {exc}"
    row["seconds"] = round(time.monotonic() - started, 3)
    if results.exists():
        row |= metrics(results)
    return row, held


def _cut(duration: float | None, timeout: float | None, ran: float | None) -> bool:
    """Whether the timeout, not the run's own end or its duration, ended it."""
    if timeout is None or ran is None or (duration is not None and duration <= timeout):
        return False
    return ran >= timeout


def point_name(sweep: Sweep, point: Point) -> str:
    return derive_name(f"{(sweep.file or sweep.experiment).stem}-{point.key}")


def _row(point: Point, results: Path) -> dict[str, Any]:
    return {
        "point": point.key,
        "index": point.index,
        "repetition": point.repetition,
        **{f"param.{k}": v for k, v in point.parameters.items()},
        "outcome": None,
        "reason": None,
        "results": str(results),
    }


def _settle_leftovers(store_url: str) -> None:
    """A sweep killed mid-point leaves that point's experiment active: swap it out."""
    if not Path(store_url).exists():
        return
    with Store.open(store_url) as store:
        testbed = Testbed(store, get_backend())
        for record in store.list():
            if record.state not in (State.DEFINED, State.SWAPPED):
                with contextlib.suppress(NestbedError):
                    testbed.swap_out(record.name, outcome="failed")


class _Recorder:
    """Appends finished points to points.jsonl (flushed, so a crash loses none)."""

    def __init__(self, folder: Path):
        self.path = folder / LOG
        self.lock = threading.Lock()

    def __call__(self, row: dict[str, Any]) -> None:
        with self.lock, self.path.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """Rows of finished points; a line cut short by a crash is ignored."""
    rows = []
    path = folder / LOG
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                rows.append(json.loads(line))
    return rows


def _check_same_sweep(sweep: Sweep, points: list[Point], folder: Path) -> None:
    description = {
        "experiment": str(sweep.experiment),
        "points": sorted([p.key, p.parameters] for p in points),
    }
    path = folder / DESCRIPTION
    if path.exists():
        before = json.loads(path.read_text())
        if before != description:
            raise UserError(
                f"{folder} holds the results of a different sweep; give another --results "
                "folder, or delete that one to start over"
            )
        return
    path.write_text(json.dumps(description, indent=2) + "\n")


def _check_parameters(sweep: Sweep, points: list[Point]) -> None:
    """A parameter that does not change the experiment is refused now (a typo in its name
    would run the same experiment N times); a value that makes a bad experiment is left to
    fail its own points."""
    base, loaded = _first_good(sweep, points)
    ignored = [w.message for w in loaded.warnings if "it is ignored" in w.message]
    if ignored:  # the ns front end's word for a parameter the file does not use
        raise UserError(f"{sweep.experiment.name}: {ignored[0]}")
    for name in sweep.parameter_names:
        values = list(dict.fromkeys(p.parameters[name] for p in points if name in p.parameters))
        seen: set[str] = set()
        for value in values:
            try:
                exp = load(sweep.experiment, parameters={**base, name: value}).experiment
            except NestbedError:
                continue
            seen.add(_semantic(exp))
            if len(seen) > 1:
                break
        if len(values) > 1 and len(seen) == 1:
            raise UserError(
                f"parameter {name} does not change experiment {sweep.experiment.name}; check "
                "its name (Tcl: set opt(NAME) or $ns define-template-parameter NAME; YAML: a "
                "field path like links.NAME.bandwidth)"
            )


def _first_good(sweep: Sweep, points: list[Point]) -> tuple[dict[str, str], Experiment]:
    """The first setting that makes a valid experiment (a bad one fails only its points);
    when none does, the first one's error."""
    first: NestbedError | None = None
    for setting in dict.fromkeys(json.dumps(p.parameters, sort_keys=True) for p in points):
        parameters = json.loads(setting)
        try:
            return parameters, load(sweep.experiment, parameters=parameters).experiment
        except NestbedError as exc:
            first = first or exc
    assert first is not None
    raise first


def _semantic(exp: Experiment) -> str:
    data = exp.model_dump(mode="json", exclude={"source", "parameters", "warnings"})
    return json.dumps(data, sort_keys=True)


# -- reusing one network for points that change only links -------------------------------------


def _reusable(
    sweep: Sweep, points: list[Point]
) -> tuple[dict[str, Experiment], None] | tuple[None, str]:
    """The points' experiments when they differ only in their links' shaping (so one network
    serves them all); else why not."""
    from nestbed.backend.plan import plan

    exps = {p.key: load(sweep.experiment, parameters=p.parameters).experiment for p in points}
    shapes = [_without_shaping(e) for e in exps.values()]
    differ = sorted({_SECTIONS.get(k, k) for s in shapes[1:] for k in s if s[k] != shapes[0][k]})
    if differ:
        return None, f"the points differ in more than their links' shaping (in {', '.join(differ)})"
    if len({_wiring(plan(e)) for e in exps.values()}) > 1:
        return None, "a link shaped in one point is a plain cable in another"
    return exps, None


# The IR's fields named as the file's sections where the two differ.
_SECTIONS = {"simulation_hard_limit_s": "simulation"}


def _without_shaping(exp: Experiment) -> dict[str, str]:
    """The experiment's sections without the links' shaping, each as canonical JSON. Not its
    `env` either: the values of `opt(NAME)`, whose effects are in the other sections."""
    data = exp.model_dump(mode="json", exclude={"source", "parameters", "env", "warnings"})
    for link in data["links"] + data["lans"]:
        for port in link["ports"]:
            port.pop("egress"), port.pop("ingress")
    return {k: json.dumps(v, sort_keys=True) for k, v in data.items()}


def _wiring(p: Any) -> str:
    """The plan without pipe parameters: which links go through linkd, which are cables."""
    return repr((p.nodes, p.veths, p.bridges, [(e.link, e.lan) for e in p.emulated]))


def _run_reusing(
    sweep: Sweep, points: list[Point], exps: dict[str, Experiment], folder: Path, store_url: str
) -> Iterator[dict[str, Any]]:
    """Swaps in once; before each point, sets every pipe to the point's shaping through linkd
    and starts a new run (a new controller, clock at 0) on the same network."""
    from nestbed.lifecycle.runs import wait_and_end

    name = derive_name(f"{(sweep.file or sweep.experiment).stem}-reused")
    doc = sweep.doc
    first = exps[points[0].key].model_copy(update={"name": name})
    with Store.open(store_url) as store:
        testbed = Testbed(store, get_backend())
        testbed.define(first, anew=True)
        active, outcome = None, "completed"
        try:
            for point in points:
                started = time.monotonic()
                results = folder / "runs" / point.key
                row = _row(point, results) | {"reused_network": True}
                exp = exps[point.key].model_copy(update={"name": name})
                options = RunOptions.make(duration_s=doc.duration, timeout_s=doc.timeout,
                                          results=results, report=doc.run_reports)  # fmt: skip
                try:
                    if active is None:
                        active = testbed.swap_in(name, options)
                    else:
                        active = testbed.next_run(name, exp, options)
                    outcome = wait_and_end(testbed, active, options)
                    ran = manifest.read(results).get("duration_s")
                    if _cut(doc.duration, doc.timeout, ran):
                        outcome = "timeout"
                    row["outcome"], row["reason"] = outcome, None
                except NestbedError as exc:
                    row["outcome"], row["reason"] = "failed", str(exc)
                row["seconds"] = round(time.monotonic() - started, 3)
                if results.exists():
                    row |= metrics(results)
                yield row
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: the point's manifest says so
            outcome = signals.outcome(exc)
            raise
        finally:
            with contextlib.suppress(NestbedError):
                if store.get(name).state == State.ACTIVE:
                    testbed.swap_out(name, outcome=outcome)


# -- a Dask cluster ---------------------------------------------------------------------------


def _run_on_cluster(
    sweep: Sweep, points: list[Point], folder: Path, address: str
) -> Iterator[dict[str, Any]]:
    """Each point is a task on a Dask worker, which runs it with its own nestbed; rows come
    back as points finish. A worker runs one point at a time (it holds the machine's
    namespaces), so give each machine one worker with one thread."""
    from distributed import Client, as_completed

    with Client(address, timeout="10s") as client:
        futures = [
            client.submit(
                run_point, sweep, p, folder, str(folder / "store.db"), key=p.key, pure=False
            )
            for p in points
        ]
        for future in as_completed(futures):
            yield future.result()
