"""The testbed's switching fabric: which switch each host hangs from and the trunks between
any two switches (fewest hops; ties broken by name, so paths are deterministic)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from nestbed.errors import UserError
from nestbed.mapper.problem import Testbed


@dataclass(frozen=True, slots=True)
class Fabric:
    switches: tuple[str, ...]
    trunk_names: tuple[str, ...]
    trunk_bps: tuple[int, ...]
    trunk_ends: tuple[tuple[int, int], ...]
    host_switch: tuple[int, ...]  # per host, index into switches (-1: none)
    paths: tuple[tuple[tuple[int, ...] | None, ...], ...]  # [s][t] -> trunk indices

    def path(self, s: int, t: int) -> tuple[int, ...] | None:
        if s == t:
            return ()
        if s < 0 or t < 0:
            return None
        return self.paths[s][t]

    def switch_path(self, s: int, t: int) -> tuple[str, ...]:
        """The switches from ``s`` to ``t``, both included."""
        hops = [s]
        for trunk in self.path(s, t) or ():
            a, b = self.trunk_ends[trunk]
            hops.append(b if hops[-1] == a else a)
        return tuple(self.switches[i] for i in hops)

    @staticmethod
    def of(testbed: Testbed) -> Fabric:
        switches = sorted(
            set(testbed.switches)
            | {h.switch for h in testbed.hosts if h.switch}
            | {t.a for t in testbed.trunks}
            | {t.b for t in testbed.trunks}
        )
        index = {s: i for i, s in enumerate(switches)}
        # Parallel trunks between one pair of switches add up (a bonded pair carries both).
        merged: dict[tuple[int, int], tuple[str, int]] = {}
        for trunk in testbed.trunks:
            if trunk.a == trunk.b:
                raise UserError(f"trunk {trunk.name} joins switch {trunk.a} to itself")
            key = tuple(sorted((index[trunk.a], index[trunk.b])))
            name, bps = merged.get(key, (trunk.name, 0))  # type: ignore[arg-type]
            merged[key] = (name, bps + trunk.bandwidth_bps)  # type: ignore[index]
        pairs = sorted(merged)
        neighbours: list[list[tuple[int, int]]] = [[] for _ in switches]
        for t, (a, b) in enumerate(pairs):
            neighbours[a].append((b, t))
            neighbours[b].append((a, t))
        paths = tuple(_paths_from(s, neighbours) for s in range(len(switches)))
        return Fabric(
            switches=tuple(switches),
            trunk_names=tuple(merged[p][0] for p in pairs),
            trunk_bps=tuple(merged[p][1] for p in pairs),
            trunk_ends=tuple(pairs),
            host_switch=tuple(index[h.switch] if h.switch else -1 for h in testbed.hosts),
            paths=paths,
        )


def _paths_from(
    source: int, neighbours: list[list[tuple[int, int]]]
) -> tuple[tuple[int, ...] | None, ...]:
    via: dict[int, tuple[int, int]] = {}
    seen = {source}
    queue = deque([source])
    while queue:
        here = queue.popleft()
        for there, trunk in sorted(neighbours[here]):
            if there not in seen:
                seen.add(there)
                via[there] = (here, trunk)
                queue.append(there)
    result: list[tuple[int, ...] | None] = []
    for target in range(len(neighbours)):
        if target == source:
            result.append(())
        elif target not in seen:
            result.append(None)
        else:
            hops = []
            node = target
            while node != source:
                node, trunk = via[node]
                hops.append(trunk)
            result.append(tuple(reversed(hops)))
    return tuple(result)
