"""The `nestbed` command line: one sub-command per verb, `--json` wherever data is printed.

Only nestbed's own errors are caught: they print one line per problem and exit with their
category's code (user 2, environment 3, internal 4). Anything else is a bug and, with
`--debug`, shows its traceback.
"""

from __future__ import annotations

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
        output.write_text(text, encoding="utf-8")
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


def run() -> None:
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
