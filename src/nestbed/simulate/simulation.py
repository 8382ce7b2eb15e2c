"""`nestbed simulate`: one run of an experiment file in ns-2, written as a run folder with the
same manifest and tables as an emulated run, so every tool that reads runs reads this one."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

from nestbed import spec
from nestbed.errors import EnvironmentProblem, NestbedError, UserError
from nestbed.model import Experiment, Where
from nestbed.results import manifest
from nestbed.results.folder import RunFolder, make_folder
from nestbed.results.report import summary, write_report
from nestbed.results.tables import EVENT_COLUMNS, PROGRAM_COLUMNS, write_table
from nestbed.simulate import ns2
from nestbed.simulate.scope import event_rows, not_simulated, program_rows
from nestbed.simulate.trace import Converter


def simulate(
    file: Path,
    results: Path,
    *,
    parameters: dict[str, str] | None = None,
    duration: float | None = None,
) -> dict[str, Any]:
    """Runs the ns-2 experiment FILE unchanged in the ns-2 simulator and writes the run folder
    RESULTS (created; it must not exist or be empty): ``manifest.json``, ``ir.json``,
    ``events.csv``, ``programs.csv`` (every program, "not simulated"), ``traffic/flows.csv``
    and ``traffic/FLOW.csv``, ``links/counters.csv``, ``tcp/FLOW.csv`` (sequence numbers of
    every TCP flow), ``report.md`` and ``plots/``.

    ``parameters`` override ``opt(NAME)`` and template parameters, as in ``nestbed run -p``;
    ``duration`` stops the simulation after that many simulated seconds (otherwise it stops at
    ``$ns halt``, or after the file's last event when it has none).

    Returns ``nestbed.results.report.summary`` of the folder plus ``not_simulated`` (one line
    per thing the file asks for that ns-2 leaves out), ``notes`` (what the simulation itself
    noticed), ``warnings`` (the front end's, ``file:line: message``), ``simulated_s``,
    ``wall_s`` and ``results``.

    Raises ``UserError`` for a bad file or parameter, or a file that ns-2 cannot run, and
    ``EnvironmentProblem`` when ns-2 is missing or crashes; the results measured until then
    are kept in RESULTS and the manifest says the run failed.
    """
    file, results = Path(file), Path(results)
    ns2.check_file(file)
    ns2.find_ns()
    if duration is not None and not duration > 0:
        raise UserError(f"duration {duration:g} s is not positive; give a number of seconds")
    exp = spec.load(file, parameters=parameters).experiment
    _prepare(results)
    missing = not_simulated(exp)
    manifest.start(
        results,
        exp,
        run_id=None,
        seeds={},
        binaries={},
        options={"backend": "ns-2", "duration": duration, "parameters": dict(parameters or {})},
    )
    write_table(RunFolder(results).programs_table, PROGRAM_COLUMNS, program_rows(exp))
    converter = Converter(exp, results)
    error: NestbedError | None = None
    with ns2.running(file, exp, parameters=parameters, duration=duration) as ns:
        try:
            converter.feed(ns.lines())
        except NestbedError as exc:
            error = exc  # what was read is kept
            ns.stop()
        except BaseException as exc:  # Ctrl-C, or a bug: what was read is kept
            ns.stop()
            if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM/SIGHUP (the CLI's)
                said = getattr(exc, "signal_name", "SIGINT")
                outcome, reason = f"interrupted ({said})", f"stopped by {said}"
            else:
                outcome, reason = "failed", repr(exc)
            _close(results, exp, converter, ns.wait(), missing, outcome, reason)
            raise
        ended = ns.wait()
    if error is None:
        error = _failure(file, ended, converter)
    if error is not None:
        outcome, reason = "failed", str(error)
    elif converter.how == "halted":
        outcome, reason = "halted", "$ns halt"
    else:
        outcome, reason = "completed", None
    _close(results, exp, converter, ended, missing, outcome, reason)
    if error is not None:
        raise type(error)(f"{error}; the results until then are in {results}") from None
    return {
        **summary(results),
        "not_simulated": missing,
        "notes": converter.notes,
        "warnings": [_where(w.where) + w.message for w in exp.warnings],
        "simulated_s": converter.end_s,
        "wall_s": ended.wall_s,
        "results": str(results),
    }


def _where(where: Where | None) -> str:
    if where is None:
        return ""
    return f"{where.file}:{where.line}: " if where.line else f"{where.file}: "


def _prepare(results: Path) -> None:
    if results.exists() and (not results.is_dir() or any(results.iterdir())):
        raise UserError(f"results folder {results} is not empty; choose a new folder")
    make_folder(results)


_TCL_WHERE = re.compile(r'\(file "([^"]+)" line (\d+)\)')
_EVENT_ERROR = re.compile(r"^ns: (.*?): (.*)$", re.S)
_SCRIPT_ERROR = re.compile(r"^nb_sim_error: (.*)$", re.M)


def _failure(file: Path, ended: ns2.Ended, converter: Converter) -> NestbedError | None:
    """The error of an ns run that did not end normally, in one sentence, or None."""
    if ended.returncode == 0 and converter.how not in (None, "error"):
        return None
    at = f"at simulated time {converter.last_t:g} s"
    if ended.returncode < 0:
        name = signal.Signals(-ended.returncode).name
        return EnvironmentProblem(
            f"ns-2 crashed ({name}) {at} while simulating {file.name}; this is a fault in ns-2 "
            "itself: simplify the experiment or report it with the file"
        )
    lines = [x for x in ended.stderr.strip().splitlines() if x.strip()]
    if ended.returncode == 0 or not lines:
        return EnvironmentProblem(
            f"ns-2 ended {at} with exit code {ended.returncode} before the simulation finished "
            f"and said nothing; run `ns` on {file.name} by hand to see why"
        )
    event = _EVENT_ERROR.match(lines[0])
    if event:
        script, message = event.group(1).strip(), event.group(2).strip()
        return UserError(
            f"{file.name}: ns-2 cannot run the event `{script}` {at}: {message}; "
            "ns-2 lacks this construct, so change or remove the event to simulate the file"
        )
    said = _SCRIPT_ERROR.search(ended.stderr)
    message = said.group(1).strip() if said else lines[0].strip()
    where = file.name
    resolved = str(file.resolve())
    for path, line in _TCL_WHERE.findall(ended.stderr):
        if path == resolved or Path(path).name == file.name:
            where = f"{file.name}:{line}"
            break
    return UserError(
        f"{where}: ns-2 cannot run this file: {message}; ns-2 lacks this construct, so change "
        "it (nestbed's front end accepts it, but the simulator does not)"
    )


def _close(
    results: Path,
    exp: Experiment,
    converter: Converter,
    ended: ns2.Ended,
    missing: list[str],
    outcome: str,
    reason: str | None,
) -> None:
    """Writes the rest of the run folder: the last tables, the manifest's end, the plots and
    the report."""
    converter.finish()
    end_s = converter.end_s or 0.0
    write_table(RunFolder(results).events, EVENT_COLUMNS, event_rows(exp, end_s))
    m = manifest.read(results)
    m["versions"]["ns-2"] = converter.header.version or None
    m["simulation"] = {
        "simulator": "ns-2",
        "simulated_s": end_s,
        "ended_by": converter.how,
        "wall_s": round(ended.wall_s, 3),
        "trace_lines": converter.lines,
        "skipped_lines": dict(converter.skipped),
        "not_simulated": missing,
        "notes": converter.notes,
    }
    manifest.write(results, m)
    manifest.end(results, outcome, reason, end_s)
    write_report(results)
