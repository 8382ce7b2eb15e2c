"""`nestbed map`: where an experiment's nodes and links would go on a testbed (docs/mapper.md);
registered in nestbed.cli."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from nestbed.cli.common import JsonOption, out, print_json
from nestbed.errors import UserError

FileArgument = Annotated[
    Path | None, typer.Argument(help="Experiment file (.ns or .yaml); or give --top.")
]


def _text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(
            f"{path}: cannot read the {what} ({exc.strerror}); check the path"
        ) from None


def map_command(
    file: FileArgument = None,
    hosts: Annotated[
        Path | None, typer.Option("--hosts", help="The testbed as hosts.yaml (docs/mapper.md).")
    ] = None,
    top: Annotated[
        Path | None, typer.Option("--top", help="The virtual topology as Emulab's .top file.")
    ] = None,
    ptop: Annotated[
        Path | None, typer.Option("--ptop", help="The testbed as Emulab's .ptop file.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the search (same seed, same mapping).")] = 0,
    to_top: Annotated[
        Path | None, typer.Option("--to-top", help="Also write the topology as a .top file.")
    ] = None,
    to_ptop: Annotated[
        Path | None, typer.Option("--to-ptop", help="Also write the testbed as a .ptop file.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Place an experiment's nodes on hosts and its links on switches and trunks.

    Without --hosts or --ptop the testbed is this machine alone. With --top or --ptop the
    mapping is printed as assign prints it, to compare the two.
    """
    from nestbed.mapper import emulab, map_topology
    from nestbed.mapper.fromir import topology_of
    from nestbed.mapper.hostsfile import one_host, parse_hosts
    from nestbed.mapper.render import assign_solution, summary

    if (file is None) == (top is None):
        raise UserError("give either an experiment file or --top FILE, not both or neither")
    if hosts is not None and ptop is not None:
        raise UserError("give either --hosts or --ptop, not both")
    if file is not None:
        from nestbed.spec import load

        topology = topology_of(load(file).experiment)
    else:
        assert top is not None
        topology = emulab.parse_top(_text(top, ".top file"), str(top))
    if hosts is not None:
        testbed = parse_hosts(_text(hosts, "hosts file"), str(hosts))
    elif ptop is not None:
        testbed = emulab.parse_ptop(_text(ptop, ".ptop file"), str(ptop))
    else:
        types = {t for node in topology.nodes for t in node.types}
        testbed = one_host("localhost", os.cpu_count() or 1, types)
    if to_top is not None:
        to_top.write_text(emulab.write_top(topology), encoding="utf-8")
    if to_ptop is not None:
        to_ptop.write_text(emulab.write_ptop(testbed), encoding="utf-8")
    mapping = map_topology(topology, testbed, seed=seed)
    if as_json:
        print_json(mapping.to_dict())
    elif top is not None or ptop is not None:
        out.print(assign_solution(mapping), end="", markup=False)
    else:
        out.print(summary(mapping), end="", markup=False)
