"""Local search from the partition's placement: first repair every violation, then lower the
cost, by moving one node or swapping two, always taking the best candidate found.

Candidates for a node are the hosts of its neighbours and, per equivalence class of hosts that
can take it, one host already in use with room and one empty host; swaps pair it with a node on
a neighbour's host. When no move improves while violations remain, the search makes the least bad
move of a violating node not moved recently (a short tabu list), a bounded number of times. All
choices are ordered or drawn from a seeded generator, so one seed gives one answer.
"""

from __future__ import annotations

import random
from collections import deque

from nestbed.mapper.compiled import Compiled
from nestbed.mapper.state import State

SWAP_PARTNERS = 6  # nodes tried on each neighbour host when swapping
REPAIR_SAMPLE = 64  # troubled nodes tried per round
FULL_SAMPLE = 3  # full hosts per class tried for swaps
# Moves and swaps the repair may evaluate: enough for chains of swaps on small problems,
# bounded on large ones (each evaluation costs tens of microseconds).
REPAIR_BUDGET = 150_000
REPAIR_BUDGET_PER_NODE = 30
STALE_ROUNDS = 100  # rounds without a new fewest violations before the repair gives up
IMPROVE_PASSES = 3
EPS = 1e-9


def better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    if a[0] < b[0] - EPS:
        return True
    return a[0] <= b[0] + EPS and a[1] < b[1] - EPS


class Search:
    def __init__(self, p: Compiled, state: State, seed: int):
        self.p = p
        self.s = state
        self.rng = random.Random(seed)
        self.evaluations = 0
        self.classes_for_kind = [
            [c for c, f in enumerate(fits) if f.type is not None] for fits in p.fits
        ]
        # Nodes without links that are alike in kind and LANs are interchangeable: swapping
        # two of them changes nothing, so such swaps are not tried.
        self.alike = [
            (
                p.node_kind[v],
                tuple(sorted(p.node_lans[v]))
                and tuple(sorted((lan, p.lan_members[lan][mi][1]) for lan, mi in p.node_lans[v])),
            )
            if not p.node_links[v] and p.node_fixed[v] < 0
            else None
            for v in range(len(p.node_kind))
        ]

    # -- candidates ---------------------------------------------------------------------------

    def neighbour_hosts(self, v: int) -> list[int]:
        p, place = self.p, self.s.place
        seen: dict[int, None] = {}
        for link in p.node_links[v]:
            u = p.link_b[link] if p.link_a[link] == v else p.link_a[link]
            seen[place[u]] = None
        for lan, _ in p.node_lans[v]:
            for h in list(self.s.lan_hosts[lan])[:4]:
                seen[h] = None
        seen.pop(place[v], None)
        return list(seen)

    def class_hosts(self, v: int) -> list[int]:
        """Per class that can take ``v``: a used host with room, an empty one and, to swap
        with, a full one."""
        p, s = self.p, self.s
        if p.node_fixed[v] >= 0:
            return [p.node_fixed[v]]
        found = []
        for c in self.classes_for_kind[p.node_kind[v]]:
            used = empty = -1
            full: list[int] = []
            for h in p.class_hosts[c]:
                if not s.room(v, h):
                    if len(full) < 4 * FULL_SAMPLE:
                        full.append(h)
                elif s.host_count[h]:
                    if used < 0:
                        used = h
                elif empty < 0:
                    empty = h
                if used >= 0 and empty >= 0 and len(full) >= 4 * FULL_SAMPLE:
                    break
            if len(full) > FULL_SAMPLE:
                full = self.rng.sample(full, FULL_SAMPLE)
            found += [h for h in (used, empty) if h >= 0] + full
        return found

    # -- evaluating ---------------------------------------------------------------------------

    def try_moves(self, moves: list[tuple[int, int]]) -> tuple[float, float]:
        """The key after making ``moves`` (node, host) in order; they are then undone."""
        s = self.s
        self.evaluations += 1
        undo = []
        for v, h in moves:
            undo.append((v, s.place[v]))
            s.move(v, h)
        key = s.key()
        for v, h in reversed(undo):
            s.move(v, h)
        return key

    def try_move(self, v: int, h: int) -> tuple[float, float]:
        return self.try_moves([(v, h)])

    def try_swap(self, v: int, w: int) -> tuple[float, float]:
        place = self.s.place
        return self.try_moves([(v, place[w]), (w, place[v])])

    def try_chain(self, v: int, w: int, x: int) -> tuple[float, float]:
        """``w`` makes way for ``v`` by moving to ``x``."""
        return self.try_moves([(w, x), (v, self.s.place[w])])

    def best_step(
        self, v: int, hosts: list[int], swaps: bool, chains: bool = False
    ) -> tuple[tuple[float, float], tuple[int, int, int] | None]:
        """The best move, swap or (with ``chains``) make-way move of ``v``:
        (key, (host, -1, -1), (-1, partner, -1) or (-1, partner, partner's new host))."""
        s, p = self.s, self.p
        best_key: tuple[float, float] = (float("inf"), float("inf"))
        best: tuple[int, int, int] | None = None
        for h in hosts:
            if s.room(v, h) or not swaps:
                key = self.try_move(v, h)
                if better(key, best_key):
                    best_key, best = key, (h, -1, -1)
            if swaps:
                partners = sorted(s.host_nodes[h])
                if len(partners) > SWAP_PARTNERS:
                    partners = self.rng.sample(partners, SWAP_PARTNERS)
                mine = self.alike[v]
                for w in partners:
                    if p.node_fixed[w] >= 0 or (mine is not None and self.alike[w] == mine):
                        continue
                    key = self.try_swap(v, w)
                    if better(key, best_key):
                        best_key, best = key, (-1, w, -1)
                    if not chains or s.room(v, h):
                        continue
                    for x in self.class_hosts(w):
                        if x != h and x != s.place[v] and s.room(w, x):
                            key = self.try_chain(v, w, x)
                            if better(key, best_key):
                                best_key, best = key, (-1, w, x)
        return best_key, best

    def apply(self, v: int, step: tuple[int, int, int]) -> None:
        h, w, x = step
        if w < 0:
            self.s.move(v, h)
        elif x >= 0:
            hw = self.s.place[w]
            self.s.move(w, x)
            self.s.move(v, hw)
        else:
            hv, hw = self.s.place[v], self.s.place[w]
            self.s.move(v, hw)
            self.s.move(w, hv)

    # -- phases -------------------------------------------------------------------------------

    def troubled_nodes(self) -> list[int]:
        s, p = self.s, self.p
        nodes: set[int] = set()
        for h in range(s.m):
            if s.host_count[h] and s.host_in_trouble(h):
                nodes |= s.host_nodes[h]
        hot = set(s.overloaded_trunks())
        fabric = p.fabric
        for link in range(len(p.link_a)):
            a, b = p.link_a[link], p.link_b[link]
            path = fabric.path(fabric.host_switch[s.place[a]], fabric.host_switch[s.place[b]])
            if path is None or (hot and hot.intersection(path)):
                nodes.update((a, b))
        for lan, members in enumerate(p.lan_members):
            if hot.intersection(s.lan_applied[lan]) or s.lan_bad[lan]:
                nodes.update(v for v, _, _ in members)
        for v, parent in enumerate(p.node_parent):
            if parent >= 0 and p.host_parent[s.place[v]] != s.place[parent]:
                nodes.update((v, parent))
        for link in range(len(p.link_a)):
            if not p.link_trivial_ok[link]:
                a, b = p.link_a[link], p.link_b[link]
                if s.place[a] == s.place[b]:
                    nodes.update((a, b))
        return sorted(nodes)

    def repair(self) -> None:
        s = self.s
        tabu: deque[int] = deque(maxlen=16)
        budget = self.evaluations + REPAIR_BUDGET + REPAIR_BUDGET_PER_NODE * len(s.place)
        best, stale = s.violation(), 0
        while self.evaluations < budget and stale < STALE_ROUNDS:
            if s.violation() == 0:
                return
            if s.violation() < best - EPS:
                best, stale = s.violation(), 0
            else:
                stale += 1
            nodes = self.troubled_nodes()
            if not nodes:
                return
            self.rng.shuffle(nodes)
            nodes = nodes[:REPAIR_SAMPLE]
            improved = False
            for v in nodes:
                if s.violation() == 0:
                    return
                here = s.key()
                key, step = self.best_step(v, self.candidates(v), swaps=True, chains=self.misfit(v))
                if step is not None and better(key, here):
                    self.apply(v, step)
                    improved = True
            if improved:
                continue
            # Stuck: the least bad step of a troubled node not moved lately.
            choices = [v for v in nodes if v not in tabu] or nodes
            v = choices[self.rng.randrange(len(choices))]
            key, step = self.best_step(v, self.candidates(v), swaps=True, chains=self.misfit(v))
            if step is not None:
                self.apply(v, step)
                tabu.append(v)

    def misfit(self, v: int) -> bool:
        """Whether ``v``'s host cannot take it at all (type, desires, features): only such a
        node is worth the many evaluations of making way for it."""
        p = self.p
        h = self.s.place[v]
        return p.fits[p.node_kind[v]][p.host_class[h]].type is None

    def candidates(self, v: int) -> list[int]:
        fixed = self.p.node_fixed[v]
        if fixed >= 0:  # a fixed node only ever goes to its host
            return [fixed] if self.s.place[v] != fixed else []
        hosts = dict.fromkeys(self.neighbour_hosts(v) + self.class_hosts(v))
        hosts.pop(self.s.place[v], None)
        return list(hosts)

    def improve(self) -> None:
        s, p = self.s, self.p
        for _ in range(IMPROVE_PASSES):
            improved = False
            order = [v for v in range(len(s.place)) if p.node_fixed[v] < 0 and self.on_edge(v)]
            self.rng.shuffle(order)
            for v in order:
                hosts = self.neighbour_hosts(v)
                if p.node_lans[v]:
                    # A LAN member may do better on any switch: try one host per class.
                    hosts = list(dict.fromkeys(hosts + self.class_hosts(v)))
                    hosts = [h for h in hosts if h != s.place[v]]
                if not hosts:
                    continue
                here = s.key()
                key, step = self.best_step(v, hosts, swaps=True)
                if step is not None and better(key, here):
                    self.apply(v, step)
                    improved = True
            if not improved:
                return

    def on_edge(self, v: int) -> bool:
        p, place = self.p, self.s.place
        h = place[v]
        for link in p.node_links[v]:
            if place[p.link_a[link]] != h or place[p.link_b[link]] != h:
                return True
        return any(self.s.lan_spans[lan] for lan, _ in p.node_lans[v])
