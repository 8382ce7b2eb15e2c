"""`nestbed agent`: serve this host to a cluster (a Dask worker tagged with the host's name
that builds the host's share of experiments); registered in nestbed.cli."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

from nestbed.cli.common import JsonOption, app, out, print_json
from nestbed.errors import InternalError, UserError
from nestbed.units import UnitError, parse_bandwidth


def _nic_bps(nic: str) -> int:
    try:
        return parse_bandwidth(nic)
    except UnitError as exc:
        raise UserError(f"--nic: {exc}") from None


def _linkd_pps(text: str | None) -> tuple[int | None, bool]:
    """--linkd-pps: (packets/s, whether to measure them instead)."""
    if text is None:
        return None, False
    if text == "measure":
        return None, True
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"--linkd-pps {text} is no packet rate; give packets per second, or "
                        "'measure'")  # fmt: skip
    return int(text), False


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
        str | None,
        typer.Option(help="Packets per second this host's link emulator carries, or "
                     "'measure' to measure it at start (the mapper keeps shaped links within "
                     "it; default: no bound)."),
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

    nic_bps = _nic_bps(nic)
    if not scheduler.startswith("tcp://"):
        raise UserError(f"--scheduler {scheduler} is no address; write tcp://HOST:8786")
    name = host or socket.gethostname().split(".")[0]
    if not HOST_NAME_RE.match(name):
        raise UserError(
            f"host name {name!r} may hold only letters, digits, '-' and '_'; give --host"
        )
    pps, measure = _linkd_pps(linkd_pps)
    if measure:
        pps = _measure_linkd()["pps"]
        out.print(f"host {name}'s link emulator carries {pps} packets/s", markup=False,
                  highlight=False)  # fmt: skip
    serve(scheduler, AgentConfig(name, slots, nic_bps, pps, clock_port or None), listen)


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


@app.command(name="ssh-agents")
def ssh_agents(
    hosts: Annotated[
        list[str],
        typer.Argument(help="The hosts: NAME=ADDRESS, or ADDRESS (a host name's first label "
                       "names it)."),
    ],
    user: Annotated[str | None, typer.Option(help="SSH user (default: yours).")] = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="The hosts' SSH port.")] = 22,
    identity: Annotated[
        Path | None, typer.Option(help="SSH private key (default: ssh-agent's and ~/.ssh's).")
    ] = None,
    known_hosts: Annotated[
        Path | None,
        typer.Option(help="File of the hosts' SSH keys (default: ~/.ssh/known_hosts)."),
    ] = None,
    remote_python: Annotated[
        str | None,
        typer.Option(help="The hosts' Python that has nestbed (default: this one's path)."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(help="Address the scheduler serves on here (default: the one that "
                     "reaches the first host)."),
    ] = None,
    scheduler_port: Annotated[
        int, typer.Option(min=0, max=65535, help="The scheduler's port (0: any free one).")
    ] = 8786,
    slots: Annotated[int, typer.Option(min=1, help="How many nodes each host may hold.")] = 64,
    nic: Annotated[str, typer.Option(help="Bandwidth of each host's link to the others.")] = "1Gb",
    linkd_pps: Annotated[
        str | None,
        typer.Option(help="Packets per second each host's link emulator carries, or "
                     "'measure': measured on each host over SSH before its agent starts."),
    ] = None,
    clock_port: Annotated[
        int, typer.Option(min=0, max=65535, help="UDP port of the agents' time service.")
    ] = 14790,
) -> None:  # fmt: skip
    """Start a cluster from here: the scheduler on this machine and an agent on each host
    over SSH; serve until stopped (Ctrl-C), then stop them."""
    import asyncio
    import signal
    import sys

    from nestbed.backend.cluster import ssh
    from nestbed.lifecycle import signals

    nic_bps = _nic_bps(nic)
    pps, measure = _linkd_pps(linkd_pps)
    options = ssh.SSHOptions(
        ssh.parse_hosts(hosts), user=user, port=port, identity=identity,
        known_hosts=known_hosts, remote_python=remote_python or sys.executable, listen=listen,
        scheduler_port=scheduler_port, slots=slots, nic_bps=nic_bps,
        linkd_pps=pps, measure_linkd=measure,
        clock_port=clock_port or None,
    )  # fmt: skip
    names = ", ".join(h.name for h in options.hosts)

    def ready(address: str) -> None:
        out.print(f"scheduler {address}, agents on {names}", markup=False, highlight=False)
        out.print(f"use it: nestbed --cluster {address} ...; Ctrl-C stops the agents",
                  markup=False, highlight=False)  # fmt: skip

    def say(line: str) -> None:  # what the hosts' agents say, and how each ended
        print(line, file=sys.stderr, flush=True)

    stopped: list[int] = []

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None

        def stop(signum: int) -> None:
            if not stopped:  # a second Ctrl-C does not cut the agents' stop short
                stopped.append(signum)
                task.cancel()

        loop = asyncio.get_running_loop()
        for signum in signals.STOPPING:
            loop.add_signal_handler(signum, stop, signum)
        try:
            await ssh.serve(options, ready, say)
        except asyncio.CancelledError:
            if not stopped:
                raise

    asyncio.run(main())
    if stopped:
        out.print(f"stopped the agents on {names} ({signal.Signals(stopped[0]).name})",
                  markup=False, highlight=False)  # fmt: skip
        raise SystemExit(128 + stopped[0])  # the shell's code for a signal's end
    raise InternalError(f"the cluster of {names} stopped serving without being stopped")


@app.command(name="linkd-capacity")
def linkd_capacity(
    seconds: Annotated[
        float, typer.Option(min=0.5, max=60, help="How long to offer frames.")
    ] = 2.0,
    as_json: JsonOption = False,
) -> None:  # fmt: skip
    """Measure the packets per second this machine's link emulator carries (64-byte frames
    through one shaped link), as an agent reports it to the mapper (--linkd-pps measure)."""
    found = _measure_linkd(seconds)
    if as_json:
        print_json(found)
        return
    bound = "" if found["limited_by"] == "linkd" else " at least (the generator was the bound)"
    out.print(f"nestbed-linkd carries {found['pps']} packets/s{bound}: 64-byte frames through "
              f"one shaped link, {found['sent_pps']} offered for {seconds:g} s",
              markup=False, highlight=False)  # fmt: skip


def _measure_linkd(seconds: float = 2.0) -> dict:
    """``studies.validate.linkd_capacity`` on this machine, refused while this host holds
    parts of a cluster's experiments (2 Mpps offered for seconds would disturb them)."""
    import tempfile
    from pathlib import Path as _Path

    from nestbed.backend.cluster import slots
    from nestbed.studies.validate import linkd_capacity as measure

    if slots.held():
        raise UserError(
            f"this host holds parts of experiments now ({slots.held()} node slots); measuring "
            "its link emulator would disturb them: swap them out first, or give --linkd-pps N"
        )
    with tempfile.TemporaryDirectory(prefix="nestbed-capacity-") as folder:
        return measure(_Path(folder), seconds)
