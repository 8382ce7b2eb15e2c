"""The `nestbed` command line: one sub-command per verb, `--json` wherever data is printed.

Only nestbed's own errors are caught: they print one line per problem and exit with their
category's code (user 2, environment 3, internal 4). Anything else is a bug and, with
`--debug`, shows its traceback.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from nestbed import __version__
from nestbed.errors import NestbedError, UserError

app = typer.Typer(
    name="nestbed",
    help="Network experimentation testbed: experiment files in, live networks and results out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _State:
    debug = False
    db: str | None = None


state = _State()

JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ParamOption = Annotated[
    list[str] | None,
    typer.Option("--param", "-p", help="Override a parameter: NAME=VALUE (repeatable)."),
]


def _parameters(values: list[str] | None) -> dict[str, str]:
    result = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserError(f"parameter {item!r} is not NAME=VALUE; write for example -p bw=10Mb")
        result[name] = value
    return result


def comma_names(text: str | None) -> tuple[str, ...] | None:
    """The names of a comma-separated option (None when the option was not given)."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise UserError(f"{text!r} names nothing; give comma-separated names")
    return names


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data), indent=2) if sys.stdout.isatty() else print(
        json.dumps(data, indent=2)
    )


@app.callback()
def main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help=(
                "Store: a SQLite path or PostgreSQL URL "
                "(default: NESTBED_DB or ~/.local/share/nestbed)."
            ),
        ),
    ] = None,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    state.debug, state.db = debug, db
    if version:
        out.print(f"nestbed {__version__}")
        raise typer.Exit()


def _load(file: Path, name: str | None, params: list[str] | None):  # type: ignore[no-untyped-def]
    from nestbed.spec import load

    return load(file, name=name, parameters=_parameters(params))


@app.command()
def parse(
    file: Annotated[Path, typer.Argument(help="Experiment file (.ns or .yaml).")],
    as_json: JsonOption = False,
    name: Annotated[str | None, typer.Option(help="Experiment name (default: file name).")] = None,
    param: ParamOption = None,
) -> None:
    """Read an experiment file and show what it describes (or its IR with --json)."""
    loaded = _load(file, name, param)
    if as_json:
        sys.stdout.write(loaded.experiment.to_json())
        return
    from nestbed.cli.render import print_summary

    print_summary(loaded.experiment, out)


@app.command()
def convert(
    file: Annotated[Path, typer.Argument(help="Experiment file (.ns or .yaml).")],
    to: Annotated[str, typer.Option("--to", help="Target format: yaml or ns.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Convert an experiment file to YAML or ns; the result parses to the same IR."""
    from nestbed.spec import yaml as yaml_front_end
    from nestbed.spec.export import to_document, to_ns

    if to not in ("yaml", "ns"):
        raise UserError(f"--to {to!r} is not a format; use --to yaml or --to ns")
    experiment = _load(file, None, None).experiment
    text = yaml_front_end.write(to_document(experiment)) if to == "yaml" else to_ns(experiment)
    if output:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(
                f"cannot write {output}: {exc.strerror}; choose another --output"
            ) from None
        err.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


def _store():  # type: ignore[no-untyped-def]
    from nestbed.store import Store

    return Store.open(state.db)


def _record_json(record: Any, with_ir: bool = False) -> dict[str, Any]:
    data = {
        "name": record.name,
        "state": record.state,
        "source_file": record.source_file,
        "source_format": record.source_format,
        "source_sha256": record.source_sha256,
        "ir_sha256": record.ir_sha256,
        "created_at": str(record.created_at),
        "updated_at": str(record.updated_at),
    }
    if with_ir:
        data["ir"] = json.loads(record.ir_json)
    return data


@app.command()
def create(
    file: Annotated[Path, typer.Argument(help="Experiment file (.ns or .yaml).")],
    name: Annotated[str | None, typer.Option(help="Experiment name (default: file name).")] = None,
    param: ParamOption = None,
    as_json: JsonOption = False,
) -> None:
    """Parse an experiment file and store it as a defined experiment."""
    loaded = _load(file, name, param)
    exp = loaded.experiment
    with _store() as store:
        record = store.create_experiment(
            exp.name,
            source_text=loaded.text,
            source_format=loaded.format,
            source_file=str(file),
            ir_json=exp.to_json(),
        )
    if as_json:
        print_json(_record_json(record))
    else:
        out.print(
            f"created experiment {exp.name} ({len(exp.nodes)} nodes, {len(exp.links)} links, "
            f"{len(exp.lans)} LANs)"
        )
        for w in exp.warnings:
            where = f"{w.where.file}:{w.where.line}: " if w.where and w.where.line else ""
            err.print(f"warning: {where}{w.message}", style="yellow")


@app.command("list")
def list_(as_json: JsonOption = False) -> None:
    """List stored experiments and their states."""
    with _store() as store:
        records = store.list()
    if as_json:
        print_json([_record_json(r) for r in records])
        return
    if not records:
        out.print("no experiments; create one with `nestbed create FILE`")
        return
    from rich.table import Table

    table = Table()
    for col in ("name", "state", "source", "updated"):
        table.add_column(col)
    for r in records:
        table.add_row(r.name, r.state, r.source_file, str(r.updated_at)[:19])
    out.print(table)


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    as_json: JsonOption = False,
) -> None:
    """Show a stored experiment: its state and what it describes."""
    from nestbed.model import Experiment

    with _store() as store:
        record = store.get(name)
    if as_json:
        print_json(_record_json(record, with_ir=True))
        return
    from nestbed.cli.render import print_summary

    out.print(
        f"{record.name}: {record.state} (from {record.source_file}, sha256 "
        f"{record.source_sha256[:12]})"
    )
    print_summary(Experiment.from_json(record.ir_json), out)


@app.command()
def delete(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """Delete a stored experiment that is not active."""
    with _store() as store:
        store.delete(name)
    out.print(f"deleted experiment {name}")


def _stored_name(store, target: str, params: list[str] | None = None) -> str:  # type: ignore[no-untyped-def]
    """An experiment name, or a file to create (or refresh) under its name first."""
    path = Path(target)
    if not (path.suffix and path.is_file()):
        if params:
            raise UserError(
                f"parameters (-p) apply to experiment files; '{target}' is a stored experiment "
                "(or no such file exists)"
            )
        return target
    loaded = _load(path, None, params)
    exp = loaded.experiment
    fields = dict(
        source_text=loaded.text,
        source_format=loaded.format,
        source_file=str(path),
        ir_json=exp.to_json(),
    )
    if store.find(exp.name) is None:
        store.create_experiment(exp.name, **fields)
    else:
        store.update_ir(exp.name, **fields)
    return exp.name


ResultsOption = Annotated[
    Path | None,
    typer.Option("--results", help="Results folder (default results/NAME-TIME)."),
]
CaptureOption = Annotated[
    bool, typer.Option("--capture", help="Capture packets at both ends of every link.")
]


LinktestOption = Annotated[
    int | None,
    typer.Option(
        "--linktest",
        metavar="LEVEL",
        help="Run linktest at this level (1-4) on the network before the run begins.",
    ),
]
LinktestStrictOption = Annotated[
    bool,
    typer.Option("--linktest-strict", help="A failed linktest check fails the swap-in."),
]
CpumonOption = Annotated[
    str | None,
    typer.Option(
        "--cpumon",
        metavar="NODES",
        help="Run the CPU-availability monitor in these nodes (comma-separated, or all); "
        "rows in nodes/cpu.csv.",
    ),
]
CaptureNodesOption = Annotated[
    str | None,
    typer.Option(
        "--capture-nodes",
        metavar="NODES",
        help="Capture only these nodes' link ends (comma-separated); implies --capture.",
    ),
]
CpumonDutyOption = Annotated[
    float | None,
    typer.Option(
        "--cpumon-duty", metavar="FRACTION", help="Share of each second it loops (default 0.1)."
    ),
]


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
    import time

    from nestbed.swap import swap_in

    with _store() as store:
        name = _stored_name(store, target)
        start = time.monotonic()
        with err.status(f"swapping in {name}") as status:
            active = swap_in(
                store, name, results=results, capture=capture, linktest=linktest,
                linktest_strict=linktest_strict, progress=status.update, cpumon=cpumon,
                cpumon_duty=cpumon_duty, capture_nodes=capture_nodes,
            )  # fmt: skip
    p = active.plan
    if active.linktest is not None:
        from nestbed.cli.render import linktest_tables

        out.print(linktest_tables(active.linktest.to_json()))
    out.print(
        f"experiment {name} is active: {len(p.nodes)} nodes, {len(p.emulated)} emulated links "
        f"({time.monotonic() - start:.2f} s); results in {active.results}"
    )


@app.command()
def swapout(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """End the experiment's run and tear its network down."""
    from nestbed.swap import swap_out

    with _store() as store:
        with err.status(f"swapping out {name}"):
            swap_out(store, name)
        runs = store.runs(name)
    where = f"; results in {runs[-1].results_dir}" if runs else ""
    out.print(f"experiment {name} is swapped out{where}")


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
    from nestbed.runs import run_experiment

    if duration is not None and duration <= 0:
        raise UserError(f"--duration {duration} is not a positive number of seconds")
    with _store() as store:
        name = _stored_name(store, target, param)
        summary = run_experiment(
            store,
            name,
            duration=duration,
            capture=capture,
            keep=keep,
            results=results,
            progress=None if as_json else err,
            linktest=linktest,
            linktest_strict=linktest_strict,
            cpumon=cpumon,
            cpumon_duty=cpumon_duty,
            capture_nodes=capture_nodes,
        )
    if as_json:
        print_json(summary)
        return
    from nestbed.cli.render import run_summary

    out.print(run_summary(summary))
    if summary["outcome"] not in ("completed", "halted"):
        raise typer.Exit(1)


@app.command()
def cleanup() -> None:
    """Remove everything nestbed left behind (after a crash) and settle experiment states."""
    from nestbed.swap import cleanup as clean

    with _store() as store:
        settled, removed = clean(store)
    for name in settled:
        out.print(f"experiment {name} was cleaned up and is swapped out")
    if removed:
        out.print(f"removed {len(removed)} namespaces of unknown experiments: {', '.join(removed)}")
    if not settled and not removed:
        out.print("nothing to clean up")


def _active(name: str, node: str | None = None):  # type: ignore[no-untyped-def]
    """The plan of an active experiment (and a check that ``node`` is one of its nodes)."""
    from nestbed.runs import active_plan

    with _store() as store:
        p = active_plan(store, name)
    if node is not None and node not in {n.name for n in p.nodes}:
        nodes = ", ".join(n.name for n in p.nodes)
        raise UserError(f"experiment '{name}' has no node '{node}'; its nodes are {nodes}")
    return p


@app.command("exec", context_settings={"allow_interspersed_args": False})
def exec_(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    node: Annotated[str, typer.Argument(help="Node name.")],
    command: Annotated[list[str], typer.Argument(help="Command and arguments (after --).")],
) -> None:
    """Run a command inside a node of an active experiment; its exit status is passed on."""
    from nestbed.backend import linux

    p = _active(name, node)
    if command[:1] == ["--"]:
        command = command[1:]
    raise typer.Exit(linux.exec_in(p, node, command).returncode)


@app.command()
def shell(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    node: Annotated[str, typer.Argument(help="Node name.")],
) -> None:
    """Open an interactive shell inside a node of an active experiment."""
    import os

    from nestbed.backend import linux

    p = _active(name, node)
    user_shell = os.environ.get("SHELL") or "/bin/sh"
    raise typer.Exit(linux.exec_in(p, node, [user_shell]).returncode)


@app.command(context_settings={"allow_interspersed_args": False})
def event(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    words: Annotated[
        list[str], typer.Argument(help="[now|+SECONDS] OBJECT VERB [ARGS...], e.g. link0 down")
    ],
    as_json: JsonOption = False,
) -> None:
    """Send an event to an active experiment (Emulab's tevc): now, or in SECONDS."""
    from nestbed.control import client as control

    after = 0.0
    if words and (words[0] == "now" or words[0].startswith("+")):
        when, words = words[0], words[1:]
        if when != "now":
            try:
                after = float(when[1:])
            except ValueError:
                raise UserError(
                    f"'{when}' is not a time; write now or +SECONDS, e.g. +2.5"
                ) from None
    if len(words) < 2:
        raise UserError("an event is OBJECT VERB [ARGS...], for example: link0 down")
    p = _active(name)
    reply = control.request(
        p, "event", object=words[0], verb=words[1], args=words[2:], after_s=after
    )
    if as_json:
        print_json(reply)
        return
    if "scheduled_s" in reply:
        out.print(f"scheduled at {reply['scheduled_s']:.3f} s into the run")
        return
    row = reply["event"]
    if row["outcome"] != "ok":
        raise UserError(f"event {' '.join(words)} failed: {row['message']}")
    detail = f": {row['message']}" if row["message"] else ""
    out.print(f"done at {row['actual_s']:.3f} s into the run{detail}")


@app.command()
def status(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    as_json: JsonOption = False,
) -> None:
    """Show an active experiment: nodes, links with live counters, programs and traffic."""
    from nestbed.control import client as control

    p = _active(name)
    data = control.request(p, "status")
    data.pop("ok", None)
    data["nodes"] = [{"node": n.name, "namespace": n.netns} for n in p.nodes]
    if as_json:
        print_json(data)
        return
    from nestbed.cli.render import status_tables

    out.print(status_tables(data))


@app.command()
def linktest(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    level: Annotated[
        int,
        typer.Option(
            "--level", help="1 latency, 2 + routing, 3 + loss, 4 + bandwidth (as Emulab's)."
        ),
    ] = 3,
    as_json: JsonOption = False,
) -> None:
    """Check that an active experiment's links, routes and shaping are what its file asked
    for; exits with 1 when a check fails."""
    from nestbed.runs import linktest_active

    with _store() as store:
        if as_json:
            report, folder = linktest_active(store, name, level)
        else:
            with err.status(f"linktest of {name}, level {level}") as status:
                report, folder = linktest_active(store, name, level, status.update)
    data = report.to_json() | {"folder": str(folder) if folder else None}
    if as_json:
        print_json(data)
    else:
        from nestbed.cli.render import linktest_tables

        out.print(linktest_tables(data))
        if folder:
            out.print(f"report in {folder}")
    if report.failures:
        raise typer.Exit(1)


@app.command()
def capture(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    link: Annotated[str, typer.Argument(help="Link or LAN name.")],
    duration: Annotated[
        float | None, typer.Option(help="Seconds to capture (default: until Ctrl-C).")
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for the pcap files.")
    ] = Path("."),
) -> None:
    """Capture packets at every end of a link or LAN (one pcap per member node)."""
    from nestbed.runs import capture_link

    p = _active(name)
    with err.status(f"capturing on {link} (Ctrl-C stops)"):
        files = capture_link(p, link, output, duration)
    for f in files:
        out.print(str(f))


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
        typer.Option(help="METRIC:X or METRIC:X:Y, plotted after the sweep (repeatable)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run an experiment over a grid of parameter values, with repetitions; resumable."""
    import os
    import time

    from nestbed.sweep import execute, table
    from nestbed.sweep.spec import from_flags, load_sweep, with_options

    options = {"repetitions": repeat, "shuffle": shuffle, "seed": seed, "duration": duration,
               "timeout": timeout, "reuse_links": reuse_links}  # fmt: skip
    if target.suffix.lower() in (".yaml", ".yml") and not (grid or zipped):
        spec = with_options(load_sweep(target), options)
    else:
        spec = from_flags(target, grid or [], zipped or [], **options)
    plots = [_plot_spec(p) for p in plot or []]
    for _, x, y in plots:
        for name in filter(None, (x, y)):
            if name not in spec.parameter_names:
                known = ", ".join(spec.parameter_names)
                raise UserError(f"--plot: the sweep has no parameter {name}; it has {known}")
    workers = parallel or str(spec.doc.parallel)
    if workers == "auto":
        count = max((os.cpu_count() or 2) // 2, 1)
    elif workers.isdigit() and int(workers) >= 1:
        count = int(workers)
    else:
        raise UserError(f"--parallel {workers} is not a number of runs or auto")
    stem = (spec.file or spec.experiment).stem
    folder = results or Path("results") / f"sweep-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder = folder.resolve()
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
            progress=execute.Progress(update),
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


def _plot_spec(text: str) -> tuple[str, str, str | None]:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise UserError(f"--plot {text!r} is not METRIC:X or METRIC:X:Y")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


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
    import time

    from nestbed.simulate import simulate as run_simulation

    folder = results or Path("results") / f"{file.stem}-sim-{time.strftime('%Y%m%d-%H%M%S')}"
    with contextlib.nullcontext() if as_json else err.status(f"simulating {file.name} in ns-2"):
        summary = run_simulation(
            file, folder.resolve(), parameters=_parameters(param), duration=duration
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
    import time

    from nestbed.analysis import analyze as run_analysis

    pcaps: list[Path] = []
    addresses = None
    run = None
    for target in targets:
        if target.is_dir():
            run = target
            found = sorted((target / "pcaps").glob("*.pcap*"))
            if not found:
                raise UserError(
                    f"{target} has no captures in pcaps/; run the experiment with --capture"
                )
            pcaps += found
            addresses = _node_addresses(target / "ir.json") or addresses
            monitored = target / "nodes" / "cpu.csv"
            if cpu is None and monitored.is_file():  # the run's --cpumon
                cpu = monitored
        elif target.exists():
            pcaps.append(target)
        else:
            raise UserError(f"{target}: no such capture or results folder; check the path")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    default = run / "analysis" if run else Path("results") / f"analyze-{stamp}"
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
    as_json: JsonOption = False,
) -> None:
    """Measure nestbed-linkd's delay, bandwidth and loss accuracy (Netbed paper, Tables 1-3)."""
    import time

    from nestbed.studies import validate as study

    settings = study.Settings.quick() if quick else study.Settings()
    folder = results or Path("results") / time.strftime("validate-%Y%m%d-%H%M%S")
    with err.status("validating") as status:
        tables = study.run(settings, folder, lambda text: status.update(f"validating: {text}"))
    if as_json:
        print_json(tables)
        return
    from nestbed.cli.render import validate_tables

    out.print(validate_tables(tables))
    out.print(f"results in {folder}")


def main_entry() -> None:
    """Entry point: run the app, turning nestbed's errors into one-line messages.

    Usage errors are click's (exit 2); anything not a ``NestbedError`` is a bug and keeps its
    traceback.
    """
    try:
        app()
    except NestbedError as exc:
        if state.debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            err.print(f"error: {line}", style="red", markup=False)
        sys.exit(exc.exit_code)


# Sub-command groups defined in their own modules (they import the helpers above).
from nestbed.cli.calibrate import calibrate as _calibrate  # noqa: E402
from nestbed.cli.study import study as _study  # noqa: E402

app.add_typer(_study, name="study")
app.add_typer(_calibrate, name="calibrate")
from nestbed.cli.map import map_command as _map  # noqa: E402

app.command(name="map")(_map)
