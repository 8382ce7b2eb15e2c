"""`nestbed validate --simulated` without root: the simulated bench's link settings as
nestbed-sim is told them, the rows beside nse's figures, and their tables."""

from __future__ import annotations

from nestbed.studies import validate, validate_sim


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple] = []

    def request(self, *words: object) -> dict:
        self.requests.append(words)
        return {"ok": True}


def test_the_bench_is_two_emulated_hosts_around_a_simulated_link(tmp_path):
    bench = validate_sim.SimulatedBench(tmp_path, name="i25vs")
    assert [n.name for n in bench.plan.nodes] == ["s", "r"]
    assert bench.plan.simulation.link_names == ("link0",)
    assert not bench.plan.needs_linkd  # both attachments are plain veths to nestbed-sim
    bench.simulator = Recorder()  # type: ignore[assignment]
    bench.set_link({"delay": {"delay_ns": 5_000_000}})
    bench.set_link({"bandwidth": {"rate_bps": 384_000}})
    bench.set_link({"loss": {"model": "bernoulli", "p": 0.025}})
    assert bench.simulator.requests == [
        ("p2p-set", "link0", 0, 0, "0.005", 50, 50, "0.0", "0.0"),
        ("p2p-set", "link0", 384_000, 384_000, "0.0", 50, 50, "0.0", "0.0"),
        ("p2p-set", "link0", 0, 0, "0.0", 50, 50, "0.025", "0.025"),
    ]


def test_delay_rows_are_adjusted_by_the_base_round_trip_and_set_beside_nse(monkeypatch):
    def rows(*_: object) -> list[dict]:
        return [
            {"delay_ms": d, "frame_bytes": 64, "rtt_ms": rtt, "rtt_error_pct": err,
             "dummynet_rtt_ms": None}
            for d, rtt, err in ((0, 0.5, None), (5, 10.6, 6.0))
        ]  # fmt: skip

    monkeypatch.setattr(validate, "measure_delay", rows)
    zero, five = validate_sim.measure_delay(None, validate_sim.QUICK, print)  # type: ignore[arg-type]
    assert "dummynet_rtt_ms" not in five
    assert zero["adjusted_rtt_ms"] is None
    assert abs(five["adjusted_rtt_ms"] - 10.1) < 1e-9
    assert abs(five["adjusted_error_pct"] - 1.0) < 1e-9
    assert (five["nse_rtt_ms"], five["nse_error_pct"]) == (10.251, 2.51)
    assert abs(five["nse_over_ours"] - 2.51 / 6.0) < 1e-9


def test_the_simulated_tables_show_nse_beside_ours():
    from rich.console import Console

    from nestbed.cli.render import validate_tables

    tables = {
        "simulated": True,
        "bandwidth": [{"bandwidth_bps": 384_000, "frame_bytes": 1518, "measured_bps": 383_990.0,
                       "error_pct": 0.0026, "nse_error_pct": 0.49, "nse_over_ours": 188.5}],
        "lag": {"worst_s": 0.0042, "seconds": 60, "seconds_over_5ms": 0},
    }  # fmt: skip
    console = Console(width=200, record=True)
    console.print(validate_tables(tables))
    text = console.export_text()
    assert "nse % err" in text and "188.5" in text
    assert "worst lag behind real time 4.2 ms; 0 of 60 seconds over 5 ms" in text
