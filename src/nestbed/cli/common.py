"""What every command family of the CLI shares: the app, the global options, common option
types and small parsers; with what ``plain`` holds without typer (the consoles, the global
options' values, the one way to reach the store and the testbed), re-exported."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nestbed import __version__
from nestbed.cli.plain import err as err
from nestbed.cli.plain import out as out
from nestbed.cli.plain import print_json as print_json
from nestbed.cli.plain import reader as reader
from nestbed.cli.plain import state as state
from nestbed.cli.plain import store as store
from nestbed.cli.plain import testbed as testbed
from nestbed.errors import UserError

app = typer.Typer(
    name="nestbed",
    help="Network experimentation testbed: experiment files in, live networks and results out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help: typer's rich help loads rich's markdown and traceback machinery,
    # a third of a second before `nestbed --help` can print anything.
    rich_markup_mode=None,
)
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ParamOption = Annotated[
    list[str] | None,
    typer.Option("--param", "-p", help="Override a parameter: NAME=VALUE (repeatable)."),
]


def parameters(values: list[str] | None) -> dict[str, str]:
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
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            metavar="ADDR",
            help="Run on the cluster whose Dask scheduler is ADDR (tcp://HOST:8786; "
            "default: NESTBED_CLUSTER, else this machine).",
        ),
    ] = None,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="NESTBED_SERVER",
            help="Work on a nestbed server (URL) instead of this machine: list, show, create, "
            "swapin, swapout, status, event, exec, shell, delete.",
        ),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            envvar="NESTBED_PROJECT",
            help="The server project to work in (default: your only one).",
        ),
    ] = None,
) -> None:
    state.server, state.project = server, project
    state.debug, state.db = debug, db
    if cluster is not None:
        import os

        # In the environment, so the experiment's controller (a process of its own) and
        # anything it starts choose the same back end.
        os.environ["NESTBED_CLUSTER"] = cluster
        os.environ["NESTBED_BACKEND"] = "cluster"
    if version:
        out.print(f"nestbed {__version__}")
        raise typer.Exit()


def load_file(file: Path, name: str | None, params: list[str] | None):  # type: ignore[no-untyped-def]
    from nestbed.spec import load

    return load(file, name=name, parameters=parameters(params))


def remote():  # type: ignore[no-untyped-def]
    """The client-mode commands (``cli.remote``) when a server is given, else None."""
    if not state.server:
        return None
    from nestbed.cli import remote as commands

    return commands


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
