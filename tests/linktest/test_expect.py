"""linktest's expectations, statistics and round planning, without root."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbtest import EXAMPLES, build
from nestbed.backend.plan import plan
from nestbed.linktest import expect, stats
from nestbed.linktest.run import (
    BANDWIDTH_SECONDS,
    Check,
    Report,
    _bandwidth_payload,
    _Tester,
    block_rate,
    markdown,
    set_aside,
)
from nestbed.spec import load

CHAIN = """
routing: {routing}
nodes: [{{name: a}}, {{name: r}}, {{name: b}}]
links:
  - {{name: ar, members: [a, r], bandwidth: 10Mb, delay: 10ms}}
  - {{name: rb, members: [r, b], bandwidth: 1Mb, delay: 5ms, loss: 0.05}}
"""


def chain(routing: str = "static"):
    return build(CHAIN.format(routing=routing))


def route_tables(exp):
    p = plan(exp)
    tables = {n.name: [(r.destination, r.via) for r in n.routes] for n in p.nodes}
    forwarding = {n.name for n in p.nodes if n.sysctls.get("net.ipv4.ip_forward") == "1"}
    return tables, forwarding


def test_a_direction_expects_its_delay_plus_serialization_at_its_rate():
    d = {(x.link, x.src): x for x in expect.directions(chain())}
    ar = d[("ar", "a")]
    # 64-byte payload: 64 + 42 header + 24 wire bytes = 1040 bits, 104 µs at 10 Mb/s.
    assert ar.delay_s(64) == pytest.approx(0.010 + 1040 / 10e6)
    assert (ar.rate_bps, ar.loss, ar.label) == (10_000_000, 0.0, "a → r")
    rb = d[("rb", "r")]
    assert rb.rate_bps == 1_000_000 and rb.loss == pytest.approx(0.05)
    assert len(d) == 4


def test_a_lan_direction_passes_the_senders_egress_and_the_receivers_ingress():
    exp = load(EXAMPLES / "lan.ns").experiment
    d = {(x.src, x.dst): x for x in expect.directions(exp) if x.link == "lan0"}
    assert len(d) == 12  # every ordered pair of four members
    # n-0 ↔ n-1: 10 ms in two halves, each serializing at 100 Mb/s. far's attachment (its
    # tb-set-node-lan-params) loses 0.01 on the way to far.
    assert d[("n-0", "n-1")].delay_s(0) == pytest.approx(0.010 + 2 * 66 * 8 / 100e6)
    far = next(p for p in exp.lans[0].ports if p.node == "far")
    assert d[("n-0", "far")].loss == pytest.approx(far.ingress.loss) and far.ingress.loss > 0
    assert d[("far", "n-0")].rate_bps == 10_000_000


def test_static_routes_reach_every_node_and_manual_ones_only_what_they_name():
    exp = chain()
    found = {r.label: r for r in expect.routes(exp, *route_tables(exp))}
    assert sorted(found) == ["a → b (10.1.2.3)", "b → a (10.1.1.2)"]
    ab = found["a → b (10.1.2.3)"]
    assert ab.reaches and [h.label for h in ab.hops] == ["a → r", "r → b"]
    assert ab.delivered == pytest.approx(0.95)

    none = chain("none")
    found = expect.routes(none, *route_tables(none))
    assert all(not r.reaches for r in found)
    assert found[0].why == "a has no route to it"


def test_a_route_through_a_node_that_does_not_forward_is_unreachable():
    exp = chain()
    tables, _ = route_tables(exp)
    found = expect.routes(exp, tables, forwarding=set())
    assert {r.why for r in found} == {"r does not forward"}


def test_a_routing_loop_is_found():
    exp = chain("manual")
    r_ip = exp.links[0].port("r").ip
    a_ip = exp.links[0].port("a").ip
    tables = {"a": [("default", r_ip)], "r": [("10.1.2.3/32", a_ip)]}  # r sends b's address back
    found = {r.src: r for r in expect.routes(exp, tables, {"r"})}
    assert not found["a"].reaches and "loop" in found["a"].why


def test_a_down_link_makes_its_directions_lose_everything():
    exp = chain()
    d = {(x.link, x.src): x for x in expect.directions(exp, down={"rb"})}
    assert d[("rb", "r")].loss == 1.0 and d[("ar", "a")].loss == 0.0
    found = expect.routes(exp, *route_tables(exp), down={"rb"})
    assert {r.why for r in found} == {"link rb is down"}


def test_with_links_replaces_links_by_name():
    exp = chain()
    changed = exp.links[0].model_copy(update={"subnet": "10.9.9.0/24"})
    assert expect.with_links(exp, [changed]).links == (changed, exp.links[1])


def test_rounds_never_put_a_node_in_two_tests_and_respect_the_load():
    users = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("e", "f")]
    made = expect.rounds(users)
    assert sorted(i for r in made for i in r) == list(range(5))
    for r in made:
        nodes = [n for i in r for n in users[i]]
        assert len(nodes) == len(set(nodes))
    assert made == [[0, 2, 4], [1, 3]]
    assert expect.rounds(users, [3, 3, 3, 3, 3], max_load_bps=6) == [[0, 2], [1, 3], [4]]


def test_the_delay_test_allows_the_tolerance_and_catches_more():
    alpha = stats.per_test_alpha(10)
    assert stats.delay_test(0.0102, 0.0001, 40, 0.010, 0.00035, alpha).passed
    late = stats.delay_test(0.0150, 0.0001, 40, 0.010, 0.00035, alpha)
    assert not late.passed and "more than 10.000 ms" in late.reason
    # A noisy mean that is not shown to be outside the tolerance passes.
    assert stats.delay_test(0.0105, 0.005, 40, 0.010, 0.00035, alpha).passed
    assert not stats.delay_test(0.010, 0.0, 1, 0.010, 0.00035, alpha).passed


def test_a_few_late_probes_do_not_fail_a_link_whose_median_is_right_but_a_wrong_delay_does():
    alpha = stats.per_test_alpha(10)
    # 40 probes of a 1 ms link, three of them held 30 ms by the host: mean 3.3 ms, sd 7.7 ms.
    samples = [0.00101] * 37 + [0.031] * 3
    mean = sum(samples) / len(samples)
    sd = (sum((x - mean) ** 2 for x in samples) / len(samples)) ** 0.5
    tolerance = stats.delay_tolerance(0.001, 0.0)
    assert not stats.delay_test(mean, 0.0001, 40, 0.001, tolerance, alpha).passed  # no median
    spared = stats.delay_test(mean, 0.0001, 40, 0.001, tolerance, alpha, median_s=0.00101)
    assert spared.passed and "median 1.010 ms within the tolerance" in spared.reason
    assert sd > 0.005
    # A delay set wrong moves the median too: still a failure.
    wrong = stats.delay_test(0.0102, 0.0001, 40, 0.001, tolerance, alpha, median_s=0.0101)
    assert not wrong.passed and "is more than" in wrong.reason


def test_loss_sample_sizes_grow_as_loss_shrinks_and_with_burstiness():
    alpha = stats.per_test_alpha(8)
    sizes = [stats.loss_packets(p, alpha) for p in (0.2, 0.05, 0.01)]
    assert sizes == sorted(sizes) and sizes[0] >= 100
    assert stats.loss_packets(0.05, alpha, correlation=0.8) > sizes[1]
    assert stats.loss_packets(0.0, alpha) == stats.ZERO_LOSS_PACKETS
    assert stats.loss_packets(1e-6, alpha) == stats.MAX_LOSS_PACKETS


def test_the_loss_test_has_the_power_it_was_sized_for():
    """Simulated: a correct link passes nearly always; one with twice the loss fails."""
    rng = np.random.default_rng(1)
    alpha = stats.per_test_alpha(8)
    p = 0.05
    n = stats.loss_packets(p, alpha)
    right = [stats.loss_test(int(rng.binomial(n, p)), n, p, alpha).passed for _ in range(200)]
    wrong = [stats.loss_test(int(rng.binomial(n, 2 * p)), n, p, alpha).passed for _ in range(200)]
    assert sum(right) >= 197
    assert sum(wrong) <= 200 * (1 - stats.POWER) + 5


def test_zero_loss_directions_tolerate_a_few_host_drops_only():
    alpha = stats.per_test_alpha(8)
    assert stats.loss_test(1, 2000, 0.0, alpha).passed
    assert not stats.loss_test(40, 2000, 0.0, alpha).passed


def test_delivery_copies_make_a_lossy_route_show_itself():
    alpha = 1e-4
    k = stats.delivery_copies(0.5, alpha)
    assert 0.5**k <= alpha < 0.5 ** (k - 1)
    assert stats.delivery_copies(1.0, alpha) == 2


def test_block_rate_ignores_an_idle_gap_and_a_backlog(tmp_path: Path):
    bits = 1538 * 8
    gap = bits / 10e6  # 10 Mb/s
    times = np.arange(2000) * gap
    times[1000:] += 0.05  # the sender stalled: the link idled 50 ms
    times[1500:1510] = times[1500]  # the receiver read ten at once
    log = tmp_path / "r.csv"
    rows = [f"{i},0,0,{int(t * 1e9)},1472,0" for i, t in enumerate(times)]
    log.write_text("seq,burst,send_ns,recv_ns,size,delay_ns\n" + "\n".join(rows) + "\n")
    assert block_rate(log, bits) == pytest.approx(10e6, rel=0.002)
    whole = (times.size - 1) * bits / (times[-1] - times[0])
    assert whole < 0.985 * 10e6  # goodput over the whole test would have been 2 % low


def test_bandwidth_payload_shrinks_for_slow_links_and_gives_up_below_a_floor():
    assert _bandwidth_payload(100_000_000) == 1472
    assert 64 <= _bandwidth_payload(500_000) < 1472
    assert _bandwidth_payload(50_000) is None


def test_checks_of_links_changed_during_the_test_become_skips():
    report = Report("x", 1, [Check(1, "ar", "a → r", "", "", "fail", "late"),
                             Check(2, "ar rb", "a → b", "", "", "pass"),
                             Check(1, "rb", "r → b", "", "", "pass")])  # fmt: skip
    set_aside(report, {"ar"})
    assert [c.verdict for c in report.checks] == ["skip", "skip", "pass"]
    assert report.checks[0].reason.startswith("an event changed the link")
    assert "| ar | a → r |" in markdown(report)


class _ScriptedTester(_Tester):
    """Delivers each bandwidth stream at a scripted fraction of its expected rate, writing the
    receiver's log as nestbed-probe would, and records which tests ran together."""

    def __init__(self, directions, factors):
        super().__init__(None, None, Report("x", 4, []))
        self.by_pair = {(d.src, d.dst): d for d in directions}
        self.factors = {pair: list(f) for pair, f in factors.items()}
        self.rounds: list[list[tuple[str, str]]] = []

    def _round(self, probes):
        self.rounds.append([(p.src, p.dst) for p in probes])
        for p in probes:
            d = self.by_pair[(p.src, p.dst)]
            factor = self.factors.get((p.src, p.dst), [1.0]).pop(0)
            if "--pps" in p.send:  # a loss test: the link lost the factor times its loss
                n = int(p.send[p.send.index("--count") + 1])
                p.sent = {"packets_sent": n}
                p.received = {"unique": n - round(factor * d.loss * n)}
                continue
            if "--log" not in p.recv:  # a latency test: every probe late by the factor
                delay_ns = factor * d.delay_s(64) * 1e9
                p.received = {"unique": 40, "delay": {"mean_ns": delay_ns, "median_ns": delay_ns,
                                                      "stdev_ns": 20_000}}  # fmt: skip
                p.sent = {"packets_sent": 40}
                continue
            payload = int(p.send[p.send.index("--size") + 1])
            bits = expect.wire_bits(payload)
            rate = factor * d.rate_bps * (1 - d.loss_after_bottleneck())
            count = int(BANDWIDTH_SECONDS * rate / bits)
            log = Path(p.recv[p.recv.index("--log") + 1])
            log.write_text("seq,burst,send_ns,recv_ns,size,delay_ns\n" + "".join(
                f"{k},0,0,{round(k * bits / rate * 1e9)},{payload},0\n" for k in range(count)
            ))  # fmt: skip
            p.sent = {"achieved_wire_rate_bps": 1.05 * d.rate_bps}
            p.received = {"packets": count, "rate": {"wire_bps": rate}}


def test_a_bandwidth_failure_is_measured_again_alone_and_only_a_second_failure_stands():
    directions = [d for d in expect.directions(chain()) if d.rate_bps]
    # a → r: the host starved the first measurement; r → a: the link is 10 % slow, both times.
    tester = _ScriptedTester(directions, {("a", "r"): [0.95, 1.0], ("r", "a"): [0.9, 0.9]})
    tester.bandwidth(directions)
    verdicts = {(c.link, c.direction): c for c in tester.report.checks}
    assert [(c.link, c.direction) for c in tester.report.checks] == [
        (d.link, d.label) for d in directions
    ]
    starved, slow = verdicts[("ar", "a → r")], verdicts[("ar", "r → a")]
    assert starved.verdict == "pass" and "measured again alone" in starved.reason
    assert starved.numbers["first_measured_bps"] == pytest.approx(9.5e6, rel=0.01)
    assert slow.verdict == "fail" and "-10.0%" in slow.reason and "the first time" in slow.reason
    assert all(c.verdict == "pass" for c in tester.report.checks if c.link == "rb")
    # The second measurements ran one at a time, after the rounds of the first.
    assert tester.rounds[-2:] == [[("a", "r")], [("r", "a")]]
    assert sum(len(r) for r in tester.rounds) == len(directions) + 2


def test_a_latency_failure_is_measured_again_alone_and_only_a_second_failure_stands():
    directions = expect.directions(chain())
    # a → r: late the first time only (a busy host); r → b: 30 % slow, both times.
    tester = _ScriptedTester(directions, {("a", "r"): [1.3, 1.0], ("r", "b"): [1.3, 1.3]})
    tester.latency(directions)
    verdicts = {(c.link, c.direction): c for c in tester.report.checks}
    assert len(tester.report.checks) == len(directions)
    late, slow = verdicts[("ar", "a → r")], verdicts[("rb", "r → b")]
    assert late.verdict == "pass" and "measured again alone" in late.reason
    assert late.numbers["first_mean_ms"] == pytest.approx(1.3 * late.numbers["mean_ms"], rel=0.01)
    assert slow.verdict == "fail" and "the first time, with others" in slow.reason
    assert tester.rounds[-2:] == [[("a", "r")], [("r", "b")]]


def test_a_loss_failure_is_measured_again_alone_and_only_a_second_failure_stands():
    directions = expect.directions(chain())
    # r → b loses 5 %: half as much the first time (chance), right the second; b → r loses
    # a third of it, both times (a wrong link).
    tester = _ScriptedTester(directions, {("r", "b"): [0.5, 1.0], ("b", "r"): [0.3, 0.3]})
    tester.loss(directions)
    verdicts = {(c.link, c.direction): c for c in tester.report.checks}
    lucky, wrong = verdicts[("rb", "r → b")], verdicts[("rb", "b → r")]
    assert lucky.verdict == "pass" and "measured again alone" in lucky.reason
    assert lucky.numbers["first_lost"] < lucky.numbers["lost"]
    assert wrong.verdict == "fail" and "the first time, with others" in wrong.reason
    assert [c.verdict for c in tester.report.checks if c.link == "ar"] == ["pass", "pass"]
    assert tester.rounds[-2:] == [[("r", "b")], [("b", "r")]]
