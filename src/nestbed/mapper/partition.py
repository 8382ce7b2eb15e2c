"""The first placement: a multilevel graph partition (METIS, through pymetis) of the virtual
topology, first over switches and then, inside each switch, over its hosts, each part sized to
what it can hold. LANs enter the graph as hubs of weight zero joined to their members, so that
cutting a LAN costs each member's bandwidth, as on the testbed.

The partition knows nothing of types, features or fixed nodes; the local search that follows
(``nestbed.mapper.search``) repairs what it gets wrong.
"""

from __future__ import annotations

import random

import pymetis

from nestbed.mapper.compiled import Compiled

UFACTOR = 10  # METIS may overfill a part by 1 %: the local search moves the excess


def initial_placement(p: Compiled, seed: int) -> list[int]:
    n = len(p.node_slots)
    place = [-1] * n
    free = [i for i in range(n) if p.node_fixed[i] < 0]
    for v in range(n):
        if p.node_fixed[v] >= 0:
            place[v] = p.node_fixed[v]
    if not free:
        return place
    hosts_of_switch: dict[int, list[int]] = {}
    for h, s in enumerate(p.fabric.host_switch):
        hosts_of_switch.setdefault(s, []).append(h)
    capacity = {s: sum(p.host_slots[h] for h in hs) for s, hs in hosts_of_switch.items()}
    demand = sum(p.node_slots[v] for v in free)
    order = sorted(capacity, key=lambda s: (-capacity[s], s))
    fewest = _enough(order, capacity, demand)
    # With no room to spare, METIS's overfill must be moved, which cuts more: one switch more
    # may cut less, and crossings come before switches in the objective.
    options = [fewest]
    if 1 < len(fewest) < len(order):
        options.append(order[: len(fewest) + 1])
    best: tuple[int, list[int], list[int]] | None = None
    for switches in options:
        parts, cut = _partition(p, free, [capacity[s] for s in switches], seed)
        if best is None or cut < best[0]:
            best = (cut, switches, parts)
    assert best is not None
    _, switches, parts = best
    for s_index, s in enumerate(switches):
        members = [v for v, part in zip(free, parts, strict=True) if part == s_index]
        if not members:
            continue
        hosts = sorted(hosts_of_switch[s], key=lambda h: (p.host_class[h], h))
        need = sum(p.node_slots[v] for v in members)
        chosen = _enough(hosts, {h: p.host_slots[h] for h in hosts}, need)
        if len(chosen) == 1:
            for v in members:
                place[v] = chosen[0]
            continue
        host_parts, _ = _partition(p, members, [p.host_slots[h] for h in chosen], seed)
        for v, part in zip(members, host_parts, strict=True):
            place[v] = chosen[part]
    _spread_overflow(p, place, free)
    return place


def _enough(order: list[int], capacity: dict[int, int], demand: int) -> list[int]:
    """The first of ``order`` whose capacities add up to ``demand`` (all of them if short)."""
    chosen, total = [], 0
    for item in order:
        if total >= demand:
            break
        if capacity[item] > 0:
            chosen.append(item)
            total += capacity[item]
    return chosen or order[:1]


def _partition(p: Compiled, nodes: list[int], sizes: list[int], seed: int) -> tuple[list[int], int]:
    """Part of each of ``nodes`` (parts sized like ``sizes``), cutting the least bandwidth,
    and the bandwidth cut (Mb/s; 0 when not partitioned)."""
    k = len(sizes)
    if k == 1:
        return [0] * len(nodes), 0
    if all(size == 1 for size in sizes) and len(nodes) <= k:
        # One node per part: nothing to partition, keep neighbours in order.
        return list(range(len(nodes))), 0
    index = {v: i for i, v in enumerate(nodes)}
    adjacency: list[dict[int, int]] = [{} for _ in nodes]
    weights = [p.node_slots[v] for v in nodes]

    def join(i: int, j: int, bps: int) -> None:
        w = max(1, bps // 1_000_000)
        adjacency[i][j] = adjacency[i].get(j, 0) + w
        adjacency[j][i] = adjacency[j].get(i, 0) + w

    for link in range(len(p.link_a)):
        a, b = p.link_a[link], p.link_b[link]
        if a in index and b in index:
            join(index[a], index[b], p.link_bps[link])
    for members in p.lan_members:
        inside = [(index[v], bps) for v, bps, _ in members if v in index]
        if len(inside) < 2:
            continue
        hub = len(adjacency)
        adjacency.append({})
        weights.append(0)
        for i, bps in inside:
            join(i, hub, bps)
    if not any(adjacency):
        return [i * k // len(nodes) for i in range(len(nodes))], 0
    starts, targets, eweights = [0], [], []
    for row in adjacency:
        for j, w in sorted(row.items()):
            targets.append(j)
            eweights.append(w)
        starts.append(len(targets))
    demand = max(sum(weights), 1)
    total = sum(sizes)
    # Two shapes of target: every part filled in proportion to its capacity (any slack is
    # imbalance METIS may use to cut less), and the first parts filled up, the last taking the
    # rest (as a person fills switches). Each with both of METIS's methods and two seeds; after
    # moving what overfills a part, the smallest cut wins (ties: the first attempt).
    slack = total / demand - 1
    proportional = ([size / total for size in sizes], max(UFACTOR, min(int(slack * 1000), 1000)))
    fill, left = [], demand
    for size in sizes:
        fill.append(min(size, left) / demand)
        left -= min(size, left)
    attempts = [
        (target, ufactor, recursive, seed + extra)
        for target, ufactor in (proportional, (fill, UFACTOR))
        for recursive in (False, True)
        for extra in (0, 1)
        if min(target) > 0
    ]
    graph = pymetis.CSRAdjacency(starts, targets)
    best: tuple[int, int, list[int]] | None = None
    for attempt, (target, ufactor, recursive, attempt_seed) in enumerate(attempts):
        result = pymetis.part_graph(
            k,
            graph,
            vweights=weights,
            eweights=eweights,
            tpwgts=target,
            recursive=recursive,
            options=pymetis.Options(seed=attempt_seed, ufactor=ufactor),
        )
        parts = list(result.vertex_part)
        _rebalance(parts, len(nodes), sizes, adjacency, weights)
        cut = sum(
            w for i, row in enumerate(adjacency) for j, w in row.items() if parts[i] != parts[j]
        )
        if best is None or (cut, attempt) < best[:2]:
            best = (cut, attempt, parts)
    assert best is not None
    return best[2][: len(nodes)], best[0]


def _rebalance(
    parts: list[int], n: int, sizes: list[int], adjacency: list[dict[int, int]], weights: list[int]
) -> None:
    """Moves nodes out of parts METIS overfilled, each time the node whose move cuts least,
    into a part with room (a neighbouring part when there is one), so that a ring's segment
    shifts along instead of scattering."""
    load = [0] * len(sizes)
    for i in range(n):
        load[parts[i]] += weights[i]
    for full in range(len(sizes)):
        while load[full] > sizes[full]:
            roomy = [q for q in range(len(sizes)) if q != full and load[q] < sizes[q]]
            if not roomy:
                return
            candidates: list[tuple[int, int, int]] = []  # -gain, node, target
            for i in range(n):
                if parts[i] != full:
                    continue
                towards: dict[int, int] = {}
                inside = 0
                for j, w in adjacency[i].items():
                    if parts[j] == full:
                        inside += w
                    else:
                        towards[parts[j]] = towards.get(parts[j], 0) + w
                choices = [
                    (inside - towards.get(q, 0), i, q)
                    for q in roomy
                    if load[q] + weights[i] <= sizes[q] or weights[i] <= 1
                ]
                if choices:
                    candidates.append(min(choices))
            if not candidates:
                return
            # Move the nodes tied for the best gain whose neighbours have not moved in this
            # batch, so that every gain used is still exact; then look again.
            touched: set[int] = set()
            candidates.sort()
            for cost, i, q in candidates:
                if load[full] <= sizes[full] or cost > candidates[0][0]:
                    break
                if i in touched or load[q] + weights[i] > sizes[q] >= load[q] + 1:
                    continue
                parts[i] = q
                load[full] -= weights[i]
                load[q] += weights[i]
                touched.add(i)
                touched.update(adjacency[i])


def _spread_overflow(p: Compiled, place: list[int], free: list[int]) -> None:
    """Moves nodes off overfull hosts to the nearest host with room (same switch first)."""
    used = [0] * len(p.host_slots)
    for v in range(len(place)):
        used[place[v]] += p.node_slots[v]
    rng = random.Random(0)
    order = list(free)
    rng.shuffle(order)
    by_switch: dict[int, list[int]] = {}
    for h, s in enumerate(p.fabric.host_switch):
        by_switch.setdefault(s, []).append(h)
    for v in order:
        h = place[v]
        if used[h] <= p.host_slots[h]:
            continue
        s = p.fabric.host_switch[h]
        candidates = by_switch[s] + [x for x in range(len(used)) if p.fabric.host_switch[x] != s]
        for x in candidates:
            if used[x] + p.node_slots[v] <= p.host_slots[x]:
                used[h] -= p.node_slots[v]
                used[x] += p.node_slots[v]
                place[v] = x
                break
