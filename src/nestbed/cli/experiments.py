"""Commands on experiment files and stored experiments: parse, convert, create, list, show,
delete. None of them needs root or touches the network."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from nestbed.cli.common import (
    JsonOption,
    ParamOption,
    app,
    err,
    load_file,
    out,
    print_json,
    reader,
    remote,
    store,
)
from nestbed.errors import UserError


@app.command()
def parse(
    file: Annotated[Path, typer.Argument(help="Experiment file (.ns or .yaml).")],
    as_json: JsonOption = False,
    name: Annotated[str | None, typer.Option(help="Experiment name (default: file name).")] = None,
    param: ParamOption = None,
) -> None:
    """Read an experiment file and show what it describes (or its IR with --json)."""
    loaded = load_file(file, name, param)
    if as_json:
        sys.stdout.write(loaded.experiment.to_json())
        return
    from nestbed.cli.render import print_summary

    print_summary(json.loads(loaded.experiment.to_json()), out)


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
    experiment = load_file(file, None, None).experiment
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
    if (server := remote()) is not None:
        return server.create(file, name, param, as_json)
    loaded = load_file(file, name, param)
    exp = loaded.experiment
    with store() as db:
        record = db.create_experiment(
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
    if (server := remote()) is not None:
        return server.list_(as_json)
    with reader() as db:
        records = db.list()
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
    if (server := remote()) is not None:
        return server.show(name, as_json)
    with reader() as db:
        record = db.get(name)
    if as_json:
        print_json(_record_json(record, with_ir=True))
        return
    from nestbed.cli.render import print_summary

    out.print(
        f"{record.name}: {record.state} (from {record.source_file}, sha256 "
        f"{record.source_sha256[:12]})"
    )
    print_summary(json.loads(record.ir_json), out)  # as stored: no models to load


@app.command()
def delete(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """Delete a stored experiment that is not active."""
    if (server := remote()) is not None:
        return server.delete(name)
    with store() as db:
        db.delete(name)
    out.print(f"deleted experiment {name}")
