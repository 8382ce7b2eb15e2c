"""Instruments and comparisons: sweep, simulate, compare, analyze, validate."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from nestbed.cli.common import JsonOption, ParamOption, app, err, out, parameters, print_json
from nestbed.errors import UserError
from nestbed.results.folder import RunFolder, default_results


@app.command()
def sweep(
    target: Annotated[
        Path, typer.Argument(help="A sweep file (YAML), or an experiment file with --grid/--zip.")
    ],
    grid: Annotated[
        list[str] | None,
        typer.Option("--grid", "-g", help="NAME=V1,V2,...: every value with every other grid."),
    ] = None,
    zipped: Annotated[
        list[str] | None,
        typer.Option("--zip", help="NAME=V1,V2,...: zipped lists vary together."),
    ] = None,
    repeat: Annotated[int | None, typer.Option(help="Repetitions of every point.")] = None,
    shuffle: Annotated[bool | None, typer.Option(help="Run points in a random order.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of that order.")] = None,
    duration: Annotated[float | None, typer.Option(help="Seconds each run lasts.")] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds after which a run is cut and marked timeout.")
    ] = None,
    parallel: Annotated[
        str | None, typer.Option(help="Runs side by side: a number, or auto (cores / 2).")
    ] = None,
    reuse_links: Annotated[
        bool | None,
        typer.Option(help="When only links change, reuse one network and reset its links."),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="A Dask scheduler address (tcp://HOST:8786).")
    ] = None,
    max_points: Annotated[
        int | None, typer.Option(help="Allow more runs than the 10 000 allowed by default.")
    ] = None,
    results: Annotated[
        Path | None, typer.Option(help="Sweep folder (default results/sweep-NAME-TIME).")
    ] = None,
    plot: Annotated[
        list[str] | None,
        typer.Option(help="METRIC:X\\[:Y], plotted after the sweep (repeatable)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run an experiment over a grid of parameter values, with repetitions; resumable."""
    from nestbed.sweep import execute, table
    from nestbed.sweep.spec import from_flags, load_sweep, plot_spec, with_options, workers

    options = {"repetitions": repeat, "shuffle": shuffle, "seed": seed, "duration": duration,
               "timeout": timeout, "reuse_links": reuse_links}  # fmt: skip
    if target.suffix.lower() in (".yaml", ".yml") and not (grid or zipped):
        spec = with_options(load_sweep(target), options)
    else:
        spec = from_flags(target, grid or [], zipped or [], **options)
    plots = [plot_spec(p, spec) for p in plot or []]
    count = workers(parallel or str(spec.doc.parallel))
    stem = (spec.file or spec.experiment).stem
    folder = (results or default_results(f"sweep-{stem}")).resolve()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = [BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=err, disable=as_json) as bar:
        task = bar.add_task("sweep", total=None)

        def update(done: int, total: int, row: dict) -> None:
            bar.update(task, completed=done, total=total)
            if row.get("outcome") not in ("completed", "halted"):
                err.print(f"point {row['point']}: {row.get('outcome')}: {row.get('reason')}")

        rows = execute.run_sweep(
            spec, folder, parallel=count, cluster=cluster, max_points=max_points,
            progress=execute.Progress(update, note=err.print),
        )  # fmt: skip
    data = table.write_tables(rows, folder)
    made = [
        str(table.plot(data, *spec_, folder / "plots" / f"{text.replace(':', '_')}.png"))
        for text, spec_ in zip(plot or [], plots, strict=True)
    ]
    outcomes = data["outcome"].value_counts().to_dict() if not data.empty else {}
    summary = {"folder": str(folder), "runs": len(data), "outcomes": outcomes, "plots": made}
    if as_json:
        print_json(summary)
    else:
        counts = ", ".join(f"{n} {o}" for o, n in outcomes.items())
        out.print(f"sweep of {len(data)} runs ({counts}); table, summary and runs in {folder}")
        for path in made:
            out.print(path)
    if any(o not in ("completed", "halted") for o in outcomes):
        raise typer.Exit(1)


@app.command()
def simulate(
    file: Annotated[Path, typer.Argument(help="An ns-2 experiment file.")],
    duration: Annotated[
        float | None, typer.Option(help="Simulated seconds (default: $ns halt or the last event).")
    ] = None,
    results: Annotated[
        Path | None, typer.Option(help="Results folder (default results/NAME-sim-TIME).")
    ] = None,
    param: ParamOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run the same experiment file in the ns-2 simulator, into the same results schema."""
    from nestbed.simulate import simulate as run_simulation

    folder = results or default_results(file.stem, "sim")
    with contextlib.nullcontext() if as_json else err.status(f"simulating {file.name} in ns-2"):
        summary = run_simulation(
            file, folder.resolve(), parameters=parameters(param), duration=duration
        )
    if as_json:
        print_json(summary)
        return
    from nestbed.cli.render import run_summary

    out.print(run_summary(summary))
    for item in summary.get("not_simulated", []):
        err.print(f"not simulated: {item}")


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Two or more results folders.")],
    tolerance: Annotated[
        float,
        typer.Option(help="Relative for throughput and delay, absolute for loss (0.02 = 2 %)."),
    ] = 0.02,
    output: Annotated[
        Path | None, typer.Option(help="Folder for compare.json, compare.md and plots.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Compare runs (simulated or emulated) flow by flow; exits with 1 beyond the tolerance."""
    from nestbed.simulate import compare as run_comparison
    from nestbed.simulate import format_table

    result = run_comparison(runs, tolerance=tolerance, output=output)
    if as_json:
        print_json(result)
    else:
        out.print(format_table(result))  # with a line for every difference beyond tolerance
    if not result["agree"]:
        raise typer.Exit(1)


@app.command()
def analyze(
    targets: Annotated[
        list[Path], typer.Argument(help="Captures (pcap, pcapng), or a run's results folder.")
    ],
    cpu: Annotated[
        Path | None,
        typer.Option(
            help="A CPU-availability table (nestbed-cpumon's CSV; default: a run folder's "
            "nodes/cpu.csv)."
        ),
    ] = None,
    results: Annotated[
        Path | None,
        typer.Option(
            help="Output folder (default: the run folder's analysis/, or results/analyze-TIME)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Throughput-anomaly analysis of TCP transfers: normal, network-limited or host anomaly,
    with the evidence (the virtualized-testbed paper; docs/analyze.md)."""
    from nestbed.analysis import analyze as run_analysis

    pcaps: list[Path] = []
    addresses = None
    run = None
    for target in targets:
        if target.is_dir():
            run = target
            found = sorted(RunFolder(target).pcaps.glob("*.pcap*"))
            if not found:
                raise UserError(
                    f"{target} has no captures in pcaps/; run the experiment with --capture"
                )
            pcaps += found
            addresses = _node_addresses(RunFolder(target).ir) or addresses
            monitored = RunFolder(target).node_cpu
            if cpu is None and monitored.is_file():  # the run's --cpumon
                cpu = monitored
        elif target.exists():
            pcaps.append(target)
        else:
            raise UserError(f"{target}: no such capture or results folder; check the path")
    default = RunFolder(run).analysis if run else default_results("analyze")
    folder = (results or default).resolve()
    busy = contextlib.nullcontext() if as_json else err.status(f"analyzing {len(pcaps)} captures")
    with busy:
        summary = run_analysis(pcaps, folder, cpu=cpu, addresses=addresses)
    if as_json:
        print_json(summary)
        return
    from nestbed.cli.render import analysis_table

    out.print(analysis_table(summary))
    out.print(f"tables, plots and report in {folder}")


def _node_addresses(ir: Path) -> dict[str, list[str]] | None:
    if not ir.exists():
        return None
    from nestbed.model import Experiment

    try:
        exp = Experiment.from_json(ir.read_text())
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise UserError(
            f"{ir} is not a readable ir.json ({type(exc).__name__}); give the captures "
            "themselves instead of the run folder"
        ) from None
    return exp.addresses()


@app.command()
def validate(
    quick: Annotated[
        bool, typer.Option("--quick", help="A short version (about a minute).")
    ] = False,
    results: Annotated[
        Path | None, typer.Option(help="Results folder (default results/validate-TIME).")
    ] = None,
    simulated: Annotated[
        bool,
        typer.Option(
            "--simulated",
            help="Measure a simulated link (nestbed-sim) beside nse's figures (Netbed §6.2).",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Measure nestbed-linkd's delay, bandwidth and loss accuracy (Netbed paper, Tables 1-3)."""
    from nestbed.studies import validate as study

    settings = study.Settings.quick() if quick else study.Settings()
    measure = study.run
    if simulated:
        from nestbed.studies import validate_sim

        settings = validate_sim.QUICK if quick else validate_sim.FULL
        measure = validate_sim.run
    folder = results or default_results("validate")
    with err.status("validating") as status:
        tables = measure(settings, folder, lambda text: status.update(f"validating: {text}"))
    if as_json:
        print_json(tables)
        return
    from nestbed.cli.render import validate_tables

    out.print(validate_tables(tables))
    out.print(f"results in {folder}")


@app.command()
def report(
    run: Annotated[Path, typer.Argument(help="A run's results folder.")],
    as_json: JsonOption = False,
) -> None:
    """Draw a run's report (report.md and plots/) from its tables, now: again, or for a run
    whose report was off or is still being drawn after its swap-out."""
    from nestbed.results.drawing import ERROR, draw, wait_drawn

    folder = RunFolder(run).root
    if not (folder / "manifest.json").is_file():
        raise UserError(f"{run} is not a run's results folder (it has no manifest.json)")
    wait_drawn(folder)  # a drawing still going on after the run finishes first
    path = draw(folder)
    if as_json:
        print_json({"report": str(path) if path else None, "error": None if path else
                    str(folder / ERROR)})  # fmt: skip
    elif path is not None:
        out.print(f"report: {path}")
    if path is None:
        raise UserError(f"the report of {run} could not be drawn; see {folder / ERROR}")
