"""`nestbed agent`: serve this host to a cluster (a Dask worker tagged with the host's name
that builds the host's share of experiments); registered in nestbed.cli."""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from nestbed.cli.common import JsonOption, app, out, print_json
from nestbed.errors import UserError
from nestbed.units import UnitError, parse_bandwidth


@app.command()
def agent(
    scheduler: Annotated[
        str, typer.Option("--scheduler", help="The cluster's Dask scheduler: tcp://HOST:8786.")
    ],
    host: Annotated[
        str | None,
        typer.Option("--host", help="This host's name in the cluster (default: its hostname)."),
    ] = None,
    slots: Annotated[int, typer.Option(min=1, help="How many nodes this host may hold.")] = 64,
    nic: Annotated[str, typer.Option(help="Bandwidth of this host's link to the others.")] = "1Gb",
    linkd_pps: Annotated[
        int | None,
        typer.Option(min=1, help="Packets per second this host's link emulator carries "
                     "(the mapper keeps shaped links within it; default: no bound)."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(help="Address to serve on, where the others' VXLAN reaches this host "
                     "(default: the one that reaches the scheduler)."),
    ] = None,
    clock_port: Annotated[
        int,
        typer.Option(min=0, max=65535, help="UDP port to answer the controlling machine's "
                     "time requests on (0: none; its clock is then asked through Dask)."),
    ] = 14790,
) -> None:  # fmt: skip
    """Serve this host to a cluster until stopped: build its share of experiments."""
    from nestbed.backend.cluster.agent import AgentConfig, serve
    from nestbed.backend.cluster.share import HOST_NAME_RE

    try:
        nic_bps = parse_bandwidth(nic)
    except UnitError as exc:
        raise UserError(f"--nic: {exc}") from None
    if not scheduler.startswith("tcp://"):
        raise UserError(f"--scheduler {scheduler} is no address; write tcp://HOST:8786")
    name = host or socket.gethostname().split(".")[0]
    if not HOST_NAME_RE.match(name):
        raise UserError(
            f"host name {name!r} may hold only letters, digits, '-' and '_'; give --host"
        )
    serve(scheduler, AgentConfig(name, slots, nic_bps, linkd_pps, clock_port or None), listen)


@app.command()
def hosts(as_json: JsonOption = False) -> None:
    """List the cluster's hosts (with --cluster): cores, memory and node slots, those its
    experiments hold and those free."""
    import os

    from nestbed.backend import CLUSTER_ENV
    from nestbed.backend.cluster.backend import ClusterBackend

    scheduler = os.environ.get(CLUSTER_ENV)
    if not scheduler:
        raise UserError(
            f"hosts lists a cluster's hosts; give --cluster tcp://HOST:8786 or set {CLUSTER_ENV}"
        )
    with ClusterBackend(scheduler) as cluster:
        facts = cluster.facts()
    rows = [{"host": f.name, "address": f.address, "cores": f.cores,
             "memory_bytes": f.memory_bytes, "slots": f.slots, "held": f.held, "free": f.free,
             "nic_bps": f.nic_bps} for f in facts]  # fmt: skip
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no host has an agent connected to the scheduler yet")
        return
    from rich.table import Table

    table = Table()
    for col in ("host", "address", "cores", "memory", "slots", "held", "free"):
        table.add_column(col, justify="left" if col in ("host", "address") else "right")
    for r in rows:
        table.add_row(r["host"], r["address"], str(r["cores"]),
                      f"{r['memory_bytes'] / 2**30:.1f} GiB", str(r["slots"]), str(r["held"]),
                      str(r["free"]))  # fmt: skip
    out.print(table)
