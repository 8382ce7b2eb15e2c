"""Mapping a topology onto a testbed: check, partition, search, re-check, describe.

``map_topology`` returns a ``Mapping`` (node → host and core, LAN → home switch, every link's
path through switches and trunks, and the cost), or raises ``UserError`` with one sentence
naming the constraint that could not be met.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from nestbed.errors import InternalError, UserError
from nestbed.mapper.check import Cost, evaluate
from nestbed.mapper.compiled import Compiled, compile_problem
from nestbed.mapper.feasibility import precheck
from nestbed.mapper.partition import initial_placement
from nestbed.mapper.problem import Testbed, Topology
from nestbed.mapper.search import Search
from nestbed.mapper.state import State

PathKind = Literal["trivial", "intraswitch", "interswitch"]


@dataclass(frozen=True, slots=True)
class Path:
    """How one virtual link (or one LAN member's link to its LAN) crosses the testbed."""

    kind: PathKind
    hosts: tuple[str, ...]  # its ends' hosts (one when trivial)
    switches: tuple[str, ...] = ()  # switch hops, in order
    trunks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mapping:
    topology: Topology
    testbed: Testbed
    seed: int
    hosts: dict[str, str]  # node -> host
    cores: dict[str, int | None]  # node -> core on its host
    homes: dict[str, str | None]  # LAN -> home switch (None: inside one host)
    paths: dict[str, Path]  # link or LAN member link -> path
    cost: Cost
    trunk_load_bps: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "nodes": {n: {"host": h, "core": self.cores[n]} for n, h in sorted(self.hosts.items())},
            "lans": dict(sorted(self.homes.items())),
            "links": {name: asdict(path) for name, path in sorted(self.paths.items())},
            "trunks": dict(sorted(self.trunk_load_bps.items())),
            "cost": {**asdict(self.cost), "score": round(self.cost.score, 6)},
        }


def map_topology(topology: Topology, testbed: Testbed, *, seed: int = 0) -> Mapping:
    precheck(topology, testbed)
    p = compile_problem(topology, testbed)
    state = State(p, initial_placement(p, seed))
    search = Search(p, state, seed)
    search.repair()
    search.improve()
    search.repair()
    hosts = {n.name: testbed.hosts[state.place[i]].name for i, n in enumerate(topology.nodes)}
    homes = {
        lan.name: p.fabric.switches[state.lan_home[i]] if state.lan_home[i] >= 0 else None
        for i, lan in enumerate(topology.lans)
    }
    evaluation = evaluate(topology, testbed, hosts, {k: v for k, v in homes.items() if v}, p.fabric)
    if evaluation.violations:
        if state.violation() == 0:
            raise InternalError(
                "the mapper's search and its checker disagree: " + evaluation.violations[0]
            )
        more = len(evaluation.violations) - 1
        raise UserError(
            "no placement was found that meets every constraint; the best one found breaks "
            f"{'this' if not more else f'{more + 1} constraints, first this'}: "
            + evaluation.violations[0]
        )
    return Mapping(
        topology=topology,
        testbed=testbed,
        seed=seed,
        hosts=hosts,
        cores=_cores(testbed, hosts),
        homes=homes,
        paths=_paths(p, state),
        cost=evaluation.cost,
        trunk_load_bps=evaluation.trunk_load_bps,
    )


def _cores(testbed: Testbed, hosts: dict[str, str]) -> dict[str, int | None]:
    """Round-robin over each host's cores, by node name (None when the host gives none)."""
    cores = {h.name: h.cores for h in testbed.hosts}
    seen: dict[str, int] = {}
    result: dict[str, int | None] = {}
    for node in sorted(hosts):
        host = hosts[node]
        if cores[host]:
            result[node] = seen.get(host, 0) % cores[host]
            seen[host] = seen.get(host, 0) + 1
        else:
            result[node] = None
    return result


def _path(p: Compiled, h1: int, s_end: int | None, h2: int | None) -> Path:
    fabric = p.fabric
    names = p.testbed.hosts
    s1 = fabric.host_switch[h1]
    if h2 is not None and h1 == h2:
        return Path("trivial", (names[h1].name,))
    s2 = fabric.host_switch[h2] if h2 is not None else s_end
    assert s2 is not None
    trunks = tuple(fabric.trunk_names[t] for t in fabric.path(s1, s2) or ())
    ends = (names[h1].name,) + ((names[h2].name,) if h2 is not None else ())
    return Path(
        "interswitch" if trunks else "intraswitch", ends, fabric.switch_path(s1, s2), trunks
    )


def _paths(p: Compiled, state: State) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    place = state.place
    for i, link in enumerate(p.topology.links):
        paths[link.name] = _path(p, place[p.link_a[i]], None, place[p.link_b[i]])
    for i, lan in enumerate(p.topology.lans):
        home = state.lan_home[i]
        for m in lan.members:
            h = place[p.node_index[m.node]]
            paths[m.link] = _path(p, h, home, None) if home >= 0 else _path(p, h, None, h)
    return paths
