"""`nestbed study`: the papers reproduced on nestbed, one command each (pubsub: docs/pubsub.md,
anomaly: docs/analyze.md, onedrop: docs/simulate.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from nestbed.cli.common import JsonOption, comma_names, err, out, print_json
from nestbed.errors import EnvironmentProblem
from nestbed.results.folder import default_results

study = typer.Typer(help="Studies that reproduce papers on nestbed.", no_args_is_help=True)


@study.command("pubsub")
def pubsub(
    quick: Annotated[
        bool, typer.Option("--quick", help="A small version (a few minutes): smaller records.")
    ] = False,
    results: Annotated[
        Path | None, typer.Option(help="Results folder (default results/pubsub-TIME).")
    ] = None,
    formats: Annotated[
        str | None, typer.Option(help="Formats, comma-separated (default: all).")
    ] = None,
    compressors: Annotated[
        str | None, typer.Option(help="Compressors, comma-separated (default: all usable).")
    ] = None,
    scenarios: Annotated[
        str | None, typer.Option(help="Loss scenarios: none, low, high (default: all).")
    ] = None,
    qos: Annotated[
        str | None, typer.Option(help="DDS reliability: best-effort, reliable or both.")
    ] = None,
    repetitions: Annotated[
        int | None, typer.Option(help="Records per format × compressor in each network run.")
    ] = None,
    local_repetitions: Annotated[
        int | None, typer.Option(help="Records per format × compressor measured locally.")
    ] = None,
    bandwidth: Annotated[str | None, typer.Option(help="Link bandwidth (100Mb).")] = None,
    delay: Annotated[str | None, typer.Option(help="One-way link delay (10ms).")] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds to wait for an echo before it counts as lost.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the first record.")] = None,
    experiment: Annotated[
        Path | None, typer.Option(help="The experiment file (default examples/pubsub.ns).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Serialization formats and compression over DDS with Gilbert loss (Esposito et al.)."""

    study = _pubsub()
    base = study.Settings.quick() if quick else study.Settings()
    settings = base.with_(
        formats=comma_names(formats), compressors=comma_names(compressors),
        scenarios=comma_names(scenarios),
        qos=qos, repetitions=repetitions, local_repetitions=local_repetitions,
        bandwidth=bandwidth, delay=delay, timeout_s=timeout, seed=seed,
    )  # fmt: skip
    study.check(settings)  # before anything is measured or a folder made
    folder = (results or default_results("pubsub")).resolve()
    with err.status("pub/sub study") as status:
        outcome = study.run(
            settings, folder, experiment=experiment or study.EXPERIMENT,
            progress=lambda text: status.update(f"pub/sub study: {text}"),
        )  # fmt: skip
    if as_json:
        print_json(outcome.to_json())
    else:
        runs = ", ".join(f"{s} {o}" for s, o in outcome.runs.items())
        out.print(f"network runs: {runs}")
        out.print(f"report: {outcome.report}")
    if any(o not in ("completed", "halted") for o in outcome.runs.values()):
        raise typer.Exit(1)


@study.command("anomaly")
def anomaly(
    results: Annotated[
        Path | None, typer.Option(help="Results folder (default results/anomaly-TIME).")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Table 2's first combination (16 KB / 8 MB) only.")
    ] = False,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds of the schedule.")] = 1,
    as_json: JsonOption = False,
) -> None:
    """A CPU-starved, a clean and a lossy sender: does analyze tell them apart? (Lee et al.)"""
    import dataclasses

    from nestbed.studies.anomaly import study as reproduction

    settings = reproduction.Settings.quick() if quick else reproduction.Settings()
    settings = dataclasses.replace(settings, rounds=rounds)
    folder = results or default_results("anomaly")
    with err.status("anomaly study") as status:
        found = reproduction.run(settings, folder, lambda text: status.update(f"anomaly: {text}"))
    if as_json:
        print_json(found)
    else:
        out.print(_table(found))
        out.print(f"{found['correct']} of {len(found['pairs'])} pairs as expected; "
                  f"report in {folder}/report.md")  # fmt: skip
    if found["correct"] != len(found["pairs"]):
        raise typer.Exit(1)


def _table(found: dict) -> Table:  # type: ignore[type-arg]
    from nestbed.studies.anomaly.study import pair_cells

    table = Table(title="anomaly study: verdicts of the data transfers per pair")
    columns = ("pair", "expected", "verdict", "agreeing", "throughput", "of ideal", "loss",
               "mean spacing", "CPU available")  # fmt: skip
    for column in columns:
        table.add_column(column)
    for p in found["pairs"]:
        cells = pair_cells(p)
        table.add_row(*(cells[c] for c in columns))
    return table


@study.command("onedrop")
def onedrop(
    results: Annotated[
        Path | None, typer.Option(help="Results folder (default results/onedrop-TIME).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """One TCP segment dropped in ns-2 and emulated: both recover by fast retransmit? (Netbed)"""

    from nestbed.studies import onedrop as one_drop

    folder = results or default_results("onedrop")
    with err.status("one-drop study") as status:
        found = one_drop.run(folder, lambda text: status.update(f"one-drop study: {text}"))
    if as_json:
        print_json(found)
    else:
        for stack, s in found["stacks"].items():
            c = s["chosen"]
            how = "not dropped"
            if c is not None:
                how = f"{s['unit']} {c['seq']:g} dropped, {c['recovery']} after "
                how += f"{c['duplicate_acks']} duplicate ACKs"
            out.print(f"{stack}: segment {one_drop.SEGMENT}: {how}")
        out.print(f"report in {folder}/report.md")
    if not found["both_fast_retransmit"]:
        raise typer.Exit(1)


def _pubsub():  # type: ignore[no-untyped-def]
    """The pub/sub study, or one sentence naming the extra it needs."""
    try:
        from nestbed.studies.pubsub import study
    except ModuleNotFoundError as exc:
        if (exc.name or "nestbed").startswith("nestbed"):
            raise  # our own module missing is a bug, not a missing extra
        raise EnvironmentProblem(
            f"the pub/sub study needs {exc.name}, part of nestbed's studies extra; install it "
            "with `pip install 'nestbed[studies]'` (make setup does)"
        ) from None
    return study
