"""`nestbed calibrate`: the instrument calibrated as in the calibration paper, and
`nestbed calibrate compare A B` (docs/calibrate.md); registered in nestbed.cli."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nestbed.cli.common import JsonOption, comma_names, err, out, print_json, state
from nestbed.errors import UserError
from nestbed.results.folder import default_results

calibrate = typer.Typer(
    help="Calibrate the instrument: loss at three points and delay over packet and burst size.",
    no_args_is_help=False,
    add_completion=False,
    invoke_without_command=True,
)


def _numbers(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"--{what} {text!r} is not comma-separated whole numbers") from None
    if not values:
        raise UserError(f"--{what} {text!r} names nothing; give comma-separated numbers")
    return values


@calibrate.callback()
def main(
    ctx: typer.Context,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="A few minutes: 6 sizes, 3 bursts, 3 repetitions, 8 receivers."
        ),
    ] = False,
    results: Annotated[
        Path | None, typer.Option(help="Results folder (default results/calibrate-TIME).")
    ] = None,
    sizes: Annotated[
        str | None,
        typer.Option(help="Packet sizes in bytes of UDP payload, comma-separated (≥ 12)."),
    ] = None,
    bursts: Annotated[
        str | None, typer.Option(help="Burst sizes in packets, comma-separated.")
    ] = None,
    repetitions: Annotated[int | None, typer.Option(help="Bursts per point.")] = None,
    gap: Annotated[
        float | None, typer.Option(help="Seconds after each burst (the paper's 100 is allowed).")
    ] = None,
    topologies: Annotated[
        str | None, typer.Option(help="Built-in topologies: link, lan, loss (default: all).")
    ] = None,
    profiles: Annotated[str | None, typer.Option(help="untuned, tuned (default: both).")] = None,
    receivers: Annotated[
        int | None, typer.Option(help="Receivers on the LAN (default 20; 8 with --quick).")
    ] = None,
    loss: Annotated[
        float | None, typer.Option(help="Loss of the loss topology's link (0.05).")
    ] = None,
    threshold: Annotated[
        float | None, typer.Option(help="Loss % at or below which a size is past the knee (1).")
    ] = None,
    tune_host: Annotated[
        bool,
        typer.Option(
            "--tune-host",
            help="Tuned profile also raises the host's netdev_max_backlog and rmem/wmem_max "
            "(global; restored afterwards).",
        ),
    ] = False,
    capture: Annotated[
        bool,
        typer.Option(
            "--capture",
            help="tcpdump at the sender's and receivers' interfaces: loss and one-way delay "
            "cross-checked from the captures (costs CPU per packet).",
        ),
    ] = False,
    experiment: Annotated[
        Path | None,
        typer.Option(help="Calibrate this experiment file instead of the built-in topologies."),
    ] = None,
    sender: Annotated[str | None, typer.Option(help="With --experiment: the sending node.")] = None,
    receiver_nodes: Annotated[
        str | None, typer.Option(help="With --experiment: receiving nodes, comma-separated.")
    ] = None,
    multicast: Annotated[
        bool, typer.Option("--multicast", help="With --experiment: send to a group on their LAN.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Calibrate the instrument (Ghatge et al.): loss at A, B, C and delay, untuned and tuned."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from nestbed.studies import calibrate as study
    from nestbed.studies.calibrate.study import total_bursts

    base = study.Settings.quick() if quick else study.Settings()
    settings = base.with_(
        sizes=_numbers(sizes, "sizes"), bursts=_numbers(bursts, "bursts"),
        repetitions=repetitions, gap_s=gap, topologies=comma_names(topologies),
        profiles=comma_names(profiles), receivers=receivers, loss=loss, threshold_pct=threshold,
        tune_host=tune_host or None, capture=capture or None,
    )  # fmt: skip
    study.check(settings)
    ir = None
    if experiment is not None:
        from nestbed.spec import load

        ir = load(experiment).experiment
    elif sender or receiver_nodes or multicast:
        raise UserError("--sender, --receiver-nodes and --multicast go with --experiment FILE")
    targets = study.plan_targets(
        settings, experiment=ir, sender=sender, receivers=comma_names(receiver_nodes),
        multicast=multicast,
    )  # fmt: skip
    from nestbed.backend import get as get_backend
    from nestbed.results.folder import make_folder

    get_backend().require_ready()  # before a folder is made for nothing
    folder = (results or default_results("calibrate")).resolve()

    make_folder(folder)
    columns = [
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(),
    ]  # fmt: skip
    with Progress(*columns, console=err, disable=as_json) as bar:
        task = bar.add_task("calibrating", total=total_bursts(settings, targets))

        def progress(text: str, done: int) -> None:
            bar.update(task, advance=done, description=text)

        outcome = study.run(settings, folder, targets=targets, progress=progress, store=state.db)
    if as_json:
        print_json(outcome.to_json())
        return
    for knee in outcome.knees:
        size = f"{knee['knee_size']} B" if knee["knee_size"] is not None else "none"
        out.print(
            f"{knee['topology']}, {knee['profile']}, burst {knee['burst']}: knee {size}; "
            f"worst loss {knee['worst_loss_pct']:.2f} % at {knee['worst_size']} B"
        )
    for check in outcome.summary["loss_checks"]:
        out.print(
            f"{check['topology']}, {check['profile']}: configured loss "
            f"{check['configured_loss'] * 100:g} %, at B {check['b_rate'] * 100:.2f} % "
            f"(A {check['a']}, C {check['c']} packets)"
        )
    out.print(f"report: {outcome.report}")


@calibrate.command("compare")
def compare(
    first: Annotated[Path, typer.Argument(help="A calibration's results folder.")],
    second: Annotated[Path, typer.Argument(help="Another calibration's results folder.")],
    results: Annotated[
        Path | None, typer.Option(help="Where to write (default results/calibrate-compare-TIME).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Compare two calibrations (before/after a change, or two machines) point by point."""
    from nestbed.studies import calibrate as study

    folder = (results or default_results("calibrate-compare")).resolve()
    path = study.compare(first, second, folder)
    if as_json:
        print_json({"report": str(path), "folder": str(folder)})
    else:
        out.print(f"report: {path}")
