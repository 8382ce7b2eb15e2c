"""Commands that swap experiments in and out: swapin, swapout, run, cleanup."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nestbed.cli.common import (
    CaptureNodesOption,
    CaptureOption,
    CpumonDutyOption,
    CpumonOption,
    JsonOption,
    LinktestOption,
    LinktestStrictOption,
    ParamOption,
    ResultsOption,
    app,
    err,
    load_file,
    out,
    print_json,
    remote,
    store,
    testbed,
)
from nestbed.errors import UserError

if TYPE_CHECKING:
    from nestbed.model.options import RunOptions


def stored_name(tb, target: str, params: list[str] | None = None) -> str:  # type: ignore[no-untyped-def]
    """An experiment name, or a file to define (created or refreshed) under its name first."""
    from nestbed.cli.fastswapin import is_file

    path = Path(target)
    if not is_file(target):
        if params:
            raise UserError(
                f"parameters (-p) apply to experiment files; '{target}' is a stored experiment "
                "(or no such file exists)"
            )
        return target
    loaded = load_file(path, None, params)
    return tb.define(loaded.experiment, source_text=loaded.text, source_format=loaded.format,
                     source_file=str(path))  # fmt: skip


def run_options(**given: object) -> RunOptions:
    """The run's options from the command line's values (None: not given)."""
    from nestbed.model.options import RunOptions, node_names

    for option, key in (("--cpumon", "cpumon"), ("--capture-nodes", "capture_nodes")):
        text = given.get(key)
        given[key] = node_names(text, option) if text is not None else None  # type: ignore[arg-type]
    return RunOptions.make(**given)


@app.command()
def swapin(
    target: Annotated[str, typer.Argument(help="Experiment name or file.")],
    results: ResultsOption = None,
    capture: CaptureOption = False,
    linktest: LinktestOption = None,
    linktest_strict: LinktestStrictOption = False,
    cpumon: CpumonOption = None,
    cpumon_duty: CpumonDutyOption = None,
    capture_nodes: CaptureNodesOption = None,
) -> None:
    """Build an experiment's network and start its controller (the run's events begin)."""
    if (server := remote()) is not None:
        if results or cpumon or cpumon_duty or capture_nodes:
            raise UserError(
                "--results, --cpumon, --cpumon-duty and --capture-nodes are for this machine; "
                "a server keeps results where it is set up to"
            )
        return server.swapin(target, {"capture": capture, "linktest": linktest,
                                      "linktest_strict": linktest_strict})  # fmt: skip
    options = run_options(results=results, capture=capture, linktest=linktest,
                          linktest_strict=linktest_strict, cpumon=cpumon,
                          cpumon_duty=cpumon_duty, capture_nodes=capture_nodes)  # fmt: skip
    from nestbed.cli.fastswapin import swap_in

    swap_in(lambda tb: stored_name(tb, target), options)


@app.command()
def swapout(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """End the experiment's run and tear its network down."""
    if (server := remote()) is not None:
        return server.swapout(name)
    from nestbed.cli.fastswapout import swap_out

    swap_out(name)


@app.command()
def run(
    target: Annotated[str, typer.Argument(help="Experiment file or name.")],
    duration: Annotated[
        float | None,
        typer.Option(help="Seconds to run (default: until the last event or $ns halt)."),
    ] = None,
    capture: CaptureOption = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the experiment active after the run.")
    ] = False,
    results: ResultsOption = None,
    param: ParamOption = None,
    linktest: LinktestOption = None,
    linktest_strict: LinktestStrictOption = False,
    cpumon: CpumonOption = None,
    cpumon_duty: CpumonDutyOption = None,
    capture_nodes: CaptureNodesOption = None,
    as_json: JsonOption = False,
) -> None:
    """Swap in, run the events, programs and traffic, collect the results, swap out."""
    if (server := remote()) is not None:
        if keep or results or param or cpumon or cpumon_duty or capture_nodes:
            raise UserError(
                "--keep, --results, -p, --cpumon, --cpumon-duty and --capture-nodes are for "
                "this machine; a server runs experiments as they are defined on it"
            )
        return server.run(target, {"duration_s": duration, "capture": capture,
                                   "linktest": linktest, "linktest_strict": linktest_strict},
                          as_json)  # fmt: skip
    from nestbed.lifecycle.runs import run as run_experiment
    from nestbed.lifecycle.signals import Interrupted

    options = run_options(duration_s=duration, capture=capture, keep=keep, results=results,
                          linktest=linktest, linktest_strict=linktest_strict, cpumon=cpumon,
                          cpumon_duty=cpumon_duty, capture_nodes=capture_nodes)  # fmt: skip
    with store() as db:
        tb = testbed(db)
        name = stored_name(tb, target, param)
        try:
            summary, code = run_experiment(tb, name, options, None if as_json else err), 0
        except Interrupted as stop:
            if stop.summary is None:
                raise  # stopped before the run began (the swap-in was undone)
            # Swapped out, what was measured kept; the exit code names the signal.
            summary, code = stop.summary, stop.exit_code
    if as_json:
        print_json(summary)
    else:
        from nestbed.cli.render import run_summary

        out.print(run_summary(summary))
    if code:
        raise typer.Exit(code)
    if summary["outcome"] not in ("completed", "halted") and not as_json:
        raise typer.Exit(1)


@app.command()
def cleanup(
    name: Annotated[
        str | None, typer.Argument(help="Only this experiment (default: every orphaned one).")
    ] = None,
    everything: Annotated[
        bool,
        typer.Option("--all", help="Also experiments whose controller still runs (asks first)."),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask before --all.")] = False,
) -> None:
    """Remove what crashed experiments left behind and settle their states; experiments whose
    controller or swap-in still runs are spared (unless --all)."""
    if everything and not yes:
        typer.confirm(
            "--all swaps out every experiment on this machine, live ones included; go on?",
            abort=True,
        )
    with store() as db:
        done = testbed(db).cleanup(name, everything=everything)
    for settled in done.settled:
        out.print(f"experiment {settled} was cleaned up and is swapped out")
    if done.removed:
        out.print(f"removed {len(done.removed)} leftovers of unknown experiments: "
                  f"{', '.join(done.removed)}")  # fmt: skip
    for spared in done.spared:
        out.print(f"spared {spared}: its controller or swap-in is alive")
    if not done.settled and not done.removed:
        out.print("nothing to clean up")
