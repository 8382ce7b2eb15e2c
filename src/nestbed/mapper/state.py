"""A placement under search, with every load and violation kept up to date move by move.

``move(v, h)`` changes one node's host and updates, in time proportional to the node's links
and LANs, the loads of host interfaces, link emulators, loopback capacity, additive features and
trunks, the discrete violations (types, slots, fixed nodes, looped-back links) and the cost
(``nestbed.mapper.check.Cost.score``). ``key()`` is (violation, cost): violation is the count of
discrete violations plus, for each resource over capacity, the fraction it is over, so that the
search can tell a smaller overload from a larger one.
"""

from __future__ import annotations

import math
from collections import Counter

from nestbed.mapper.check import score
from nestbed.mapper.compiled import Compiled
from nestbed.mapper.problem import VIOLATION_WEIGHT, FeatureKind


class State:
    def __init__(self, p: Compiled, place: list[int]):
        self.p = p
        hosts = p.testbed.hosts
        m, self.m = len(hosts), len(hosts)
        self.nt = len(p.fabric.trunk_bps)
        self.nf = len(p.additive_names)
        # Resources: nic[h], pps[h], loopback[h], trunk[t], additive[h * nf + f].
        self.r_pps, self.r_triv, self.r_trunk = m, 2 * m, 3 * m
        self.r_add = 3 * m + self.nt
        inf = math.inf
        cap = [float(h.nic_bps) for h in hosts]
        cap += [float(h.linkd_pps) if h.linkd_pps is not None else inf for h in hosts]
        cap += [float(h.trivial_bps) if h.trivial_bps is not None else inf for h in hosts]
        cap += [float(b) for b in p.fabric.trunk_bps]
        for h in range(m):
            cap += p.additive_cap[h]
        self.cap = cap
        self.scale = [c if 0 < c < inf else 1e8 for c in cap]
        self.load = [0.0] * len(cap)
        self.frac = 0.0
        self.disc = 0
        self.nic_bps = 0.0
        self.trunk_bps = 0.0
        self.soft = 0.0
        self.host_count = [0] * m
        self.host_nodes: list[set[int]] = [set() for _ in range(m)]
        self.host_free = list(p.host_slots)
        self.switch_hosts = [0] * len(p.fabric.switches)
        self.hosts_used = 0
        self.switches_used = 0
        self.slot_use: list[dict[tuple[str, bool], int]] = [{} for _ in range(m)]
        self.dyn: list[Counter[str]] = [Counter() for _ in range(m)]
        self.type_hosts: Counter[str] = Counter()
        self.global_users = [0] * len(p.global_features)
        nl = len(p.lan_members)
        self.lan_hosts: list[Counter[int]] = [Counter() for _ in range(nl)]
        self.lan_switch_bps: list[Counter[int]] = [Counter() for _ in range(nl)]
        self.lan_spans = [False] * nl
        self.lan_home = [-1] * nl
        self.lan_applied: list[dict[int, float]] = [{} for _ in range(nl)]
        self.lan_bad = [0] * nl
        self.place = list(place)
        for v, h in enumerate(place):
            self._node(v, h, 1)
        for v, parent in enumerate(p.node_parent):
            if parent >= 0 and p.host_parent[place[v]] != place[parent]:
                self.disc += 1
        for link in range(len(p.link_a)):
            self._link(link, 1)
        for lan in range(nl):
            self._lan_init(lan)

    # -- the objective -----------------------------------------------------------------------

    def violation(self) -> float:
        return self.disc + (self.frac if self.frac > 1e-12 else 0.0)

    def cost(self) -> float:
        return score(self.nic_bps, self.trunk_bps, self.hosts_used, self.switches_used, self.soft)

    def key(self) -> tuple[float, float]:
        return (self.violation(), self.cost())

    # -- moves ----------------------------------------------------------------------------

    def move(self, v: int, h: int) -> None:
        p = self.p
        old = self.place[v]
        if old == h:
            return
        for link in p.node_links[v]:
            self._link(link, -1)
        for lan, mi in p.node_lans[v]:
            self._lan_leave(lan, mi, old)
        self._subnodes(v, -1)
        self._node(v, old, -1)
        self.place[v] = h
        self._node(v, h, 1)
        self._subnodes(v, 1)
        for link in p.node_links[v]:
            self._link(link, 1)
        for lan, mi in p.node_lans[v]:
            self._lan_join(lan, mi, h)

    def _subnodes(self, v: int, sign: int) -> None:
        """A subnode's host must be a subnode of its parent's host: one violation per pair
        that is not, counted for ``v`` as child and as parent."""
        p = self.p
        parent = p.node_parent[v]
        pairs = [(v, parent)] if parent >= 0 else []
        pairs += [(c, v) for c in p.node_children[v]]
        for child, of in pairs:
            if p.host_parent[self.place[child]] != self.place[of]:
                self.disc += sign

    def _res(self, r: int, delta: float) -> None:
        load = self.load
        old = load[r]
        new = old + delta
        load[r] = new
        cap = self.cap[r]
        if old > cap or new > cap:
            self.frac += (max(0.0, new - cap) - max(0.0, old - cap)) / self.scale[r]

    def _nic(self, h: int, bps: float) -> None:
        self._res(h, bps)
        self.nic_bps += bps

    def _node(self, v: int, h: int, sign: int) -> None:
        p = self.p
        if sign > 0:
            self.host_nodes[h].add(v)
        else:
            self.host_nodes[h].discard(v)
        if p.node_fixed[v] >= 0 and p.node_fixed[v] != h:
            self.disc += sign
        fit = p.fits[p.node_kind[v]][p.host_class[h]]
        host = p.testbed.hosts[h]
        count = self.host_count[h]
        self.host_count[h] = count + sign
        if (count == 0) != (count + sign == 0):
            s = p.fabric.host_switch[h]
            self.hosts_used += sign
            if s >= 0:
                before = self.switch_hosts[s]
                self.switch_hosts[s] = before + sign
                if (before == 0) != (before + sign == 0):
                    self.switches_used += sign
        if fit.type is None:
            self.disc += sign
            return
        self.soft += sign * fit.soft_cost
        slots = p.node_slots[v] * sign
        key = (fit.type, fit.static)
        use = self.slot_use[h]
        old = use.get(key, 0)
        new = old + slots
        use[key] = new
        have = (host.static_types if fit.static else host.types)[fit.type]
        self.disc += max(0, new - have) - max(0, old - have)
        if not fit.static or not host.types:
            self.host_free[h] -= slots  # a guide to where there is room; slots are counted above
        if not fit.static:
            dyn = self.dyn[h]
            before = len(dyn)
            dyn[fit.type] += sign
            if dyn[fit.type] == 0:
                del dyn[fit.type]
            after = len(dyn)
            self.disc += max(0, after - 1) - max(0, before - 1)
            if before != after:
                limit = p.testbed.type_limits.get(fit.type)
                old_n = self.type_hosts[fit.type]
                self.type_hosts[fit.type] = old_n + (after - before)
                if limit is not None:
                    self.disc += max(0, old_n + after - before - limit) - max(0, old_n - limit)
        base = self.r_add + h * self.nf
        for f, amount in p.node_additive[v]:
            self._res(base + f, sign * amount)
        if p.host_globals[h]:
            desires = p.node_desires[v]
            for g in p.host_globals[h]:
                name, kind, weight = p.global_features[g]
                if name in desires:
                    continue
                old_u = self.global_users[g]
                new_u = old_u + sign
                self.global_users[g] = new_u
                pay_old, pay_new = _paying(kind, old_u), _paying(kind, new_u)
                self.soft += (pay_new - pay_old) * weight
                if weight >= VIOLATION_WEIGHT:
                    self.disc += pay_new - pay_old

    def _link(self, link: int, sign: int) -> None:
        p = self.p
        a, b = self.place[p.link_a[link]], self.place[p.link_b[link]]
        bps = sign * p.link_bps[link]
        pps = sign * p.link_pps[link]
        if a == b:
            if not p.link_trivial_ok[link]:
                self.disc += sign
            self._res(self.r_triv + a, bps)
            if pps:
                self._res(self.r_pps + a, 2 * pps)
            return
        self._nic(a, bps)
        self._nic(b, bps)
        if pps:
            self._res(self.r_pps + a, pps)
            self._res(self.r_pps + b, pps)
        path = p.fabric.path(p.fabric.host_switch[a], p.fabric.host_switch[b])
        if path is None:
            self.disc += sign
            return
        for t in path:
            self._res(self.r_trunk + t, bps)
        self.trunk_bps += bps * len(path)

    # -- LANs: a member leaves, then joins (move() always does both) ----------------------

    def _lan_init(self, lan: int) -> None:
        members = self.p.lan_members[lan]
        for v, bps, _ in members:
            h = self.place[v]
            self.lan_hosts[lan][h] += 1
            self.lan_switch_bps[lan][self.p.fabric.host_switch[h]] += bps
        spans = self.lan_spans[lan] = len(self.lan_hosts[lan]) > 1
        for v, bps, pps in members:
            h = self.place[v]
            if pps:
                self._res(self.r_pps + h, 2 * pps)
            if spans:
                self._nic(h, bps)
            else:
                self._res(self.r_triv + h, bps)
        self._lan_apply(lan)

    def _lan_leave(self, lan: int, mi: int, h: int) -> None:
        p = self.p
        _, bps, pps = p.lan_members[lan][mi]
        if pps:
            self._res(self.r_pps + h, -2 * pps)
        self._lan_unapply(lan)
        if self.lan_spans[lan]:
            self._nic(h, -bps)
        else:
            self._res(self.r_triv + h, -bps)
        hosts = self.lan_hosts[lan]
        hosts[h] -= 1
        if not hosts[h]:
            del hosts[h]
        s = p.fabric.host_switch[h]
        sw = self.lan_switch_bps[lan]
        sw[s] -= bps
        if not sw[s]:
            del sw[s]
        self._lan_respan(lan, skip=mi)

    def _lan_join(self, lan: int, mi: int, h: int) -> None:
        p = self.p
        _, bps, pps = p.lan_members[lan][mi]
        if pps:
            self._res(self.r_pps + h, 2 * pps)
        self._lan_unapply(lan)
        self.lan_hosts[lan][h] += 1
        self.lan_switch_bps[lan][p.fabric.host_switch[h]] += bps
        self._lan_respan(lan, skip=mi)
        if self.lan_spans[lan]:
            self._nic(h, bps)
        else:
            self._res(self.r_triv + h, bps)
        self._lan_apply(lan)

    def _lan_respan(self, lan: int, skip: int) -> None:
        """Moves the other members' traffic between loopback and interfaces when the LAN
        starts or stops spanning hosts."""
        spans = len(self.lan_hosts[lan]) > 1
        if spans == self.lan_spans[lan]:
            return
        self.lan_spans[lan] = spans
        sign = 1 if spans else -1
        for i, (u, bps, _) in enumerate(self.p.lan_members[lan]):
            if i != skip:
                hu = self.place[u]
                self._res(self.r_triv + hu, -sign * bps)
                self._nic(hu, sign * bps)

    def _lan_unapply(self, lan: int) -> None:
        applied = self.lan_applied[lan]
        for t, bps in applied.items():
            self._res(self.r_trunk + t, -bps)
            self.trunk_bps -= bps
        self.lan_applied[lan] = {}
        self.disc -= self.lan_bad[lan]
        self.lan_bad[lan] = 0
        self.lan_home[lan] = -1

    def _lan_apply(self, lan: int) -> None:
        """Puts a spanning LAN's hub on the switch that overloads trunks least, then crosses
        the fewest trunks (then the first such switch)."""
        if not self.lan_spans[lan]:
            return
        fabric = self.p.fabric
        members = sorted(self.lan_switch_bps[lan].items())
        best: tuple[float, float, int] | None = None
        best_loads: dict[int, float] = {}
        for home in range(len(fabric.switches)):
            loads: dict[int, float] = {}
            reachable = True
            for s, bps in members:
                path = fabric.path(s, home)
                if path is None:
                    reachable = False
                    break
                for t in path:
                    loads[t] = loads.get(t, 0.0) + bps
            if not reachable:
                continue
            over = 0.0
            for t, bps in loads.items():
                r = self.r_trunk + t
                cap, load = self.cap[r], self.load[r]
                over += (max(0.0, load + bps - cap) - max(0.0, load - cap)) / self.scale[r]
            candidate = (over, sum(loads.values()), home)
            if best is None or candidate < best:
                best, best_loads = candidate, loads
        if best is None:
            self.lan_bad[lan] = 1
            self.disc += 1
            return
        self.lan_home[lan] = best[2]
        self.lan_applied[lan] = best_loads
        for t, bps in best_loads.items():
            self._res(self.r_trunk + t, bps)
            self.trunk_bps += bps

    # -- what is wrong now ----------------------------------------------------------------

    def room(self, v: int, h: int) -> bool:
        return self.host_free[h] >= self.p.node_slots[v]

    def overloaded_trunks(self) -> list[int]:
        base = self.r_trunk
        return [t for t in range(self.nt) if self.load[base + t] > self.cap[base + t] * (1 + 1e-9)]

    def host_in_trouble(self, h: int) -> bool:
        load, cap = self.load, self.cap
        for r in (h, self.r_pps + h, self.r_triv + h):
            if load[r] > cap[r] * (1 + 1e-9):
                return True
        base = self.r_add + h * self.nf
        if any(load[base + f] > cap[base + f] * (1 + 1e-9) for f in range(self.nf)):
            return True
        if len(self.dyn[h]) > 1 or self.host_free[h] < 0:
            return True
        p = self.p
        for v in self.host_nodes[h]:
            if p.fits[p.node_kind[v]][p.host_class[h]].type is None:
                return True
            if p.node_fixed[v] >= 0 and p.node_fixed[v] != h:
                return True
        use = self.slot_use[h]
        host = p.testbed.hosts[h]
        return any(
            n > (host.static_types if static else host.types).get(t, 0)
            for (t, static), n in use.items()
        )


def _paying(kind: FeatureKind, users: int) -> int:
    if kind is FeatureKind.ONE_IS_OKAY:
        return max(users - 1, 0)
    return 1 if users > 0 else 0
