"""Fixtures of the hybrid tests: runs of experiment files through the life cycle, in a store
of the test's own, swapped out however the test ends."""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from nestbed.spec import load


@dataclass(frozen=True)
class Ran:
    """A finished run: its experiment, summary and results folder."""

    exp: Any
    summary: dict[str, Any]
    results: Path

    def table(self, relative: str) -> list[dict[str, str]]:
        with (self.results / relative).open() as f:
            return list(csv.DictReader(f))

    @property
    def flows(self) -> dict[str, dict[str, str]]:
        """traffic/flows.csv, a row per flow by name."""
        return {row["flow"]: row for row in self.table("traffic/flows.csv")}

    # Read by bounds that follow what the run measured: times on the run's clock (seconds
    # since t0, as events.csv's actual_s), from the raw logs of traffic/raw/.

    def events(self) -> dict[tuple[str, str], float]:
        """events.csv's dispatch times, actual_s, by (object, verb)."""
        return {(e["object"], e["verb"]): float(e["actual_s"]) for e in self.table("events.csv")}

    def raw_json(self, name: str) -> dict[str, Any]:
        """The summary a tool printed into traffic/raw/NAME (its last line)."""
        return json.loads((self.results / "traffic" / "raw" / name).read_text().splitlines()[-1])

    @cached_property
    def t0_ns(self) -> int:
        """The run's t0 on CLOCK_MONOTONIC. No table holds it, but an FTP flow's rows are its
        receiver's first byte less t0 (traffic.FtpFlow.results: t_s = (first_ns - t0) / 1e9 + k)
        to 10 ns, so the run must have one."""
        flow = next(f for f, row in self.flows.items() if row["kind"] == "ftp")
        first_s = float(self.table(f"traffic/{flow}.csv")[0]["t_s"])
        return int(self.raw_json(f"{flow}-0.recv")["first_ns"] - round(first_s * 1e9))

    def run_s(self, mono_ns: int) -> float:
        """A CLOCK_MONOTONIC stamp (whole, or mod 2^48 as in the probe's header) on the run's clock."""
        return ((mono_ns - self.t0_ns) % (1 << 48)) / 1e9

    def delivered_sent_s(self, flow: str) -> list[float]:
        """When each datagram of CBR FLOW's first session that arrived was sent, on the run's clock,
        by the sender's own stamp (the receive log's send_ns): a receiver held up does not move it."""
        with (self.results / "traffic" / "raw" / f"{flow}-0.log").open() as f:
            return sorted(self.run_s(int(r["send_ns"])) for r in csv.DictReader(f))

    def lag_max_s(self) -> float:
        """The largest lag behind real time the simulator reported in the run (simulation/lag.csv)."""
        return max(float(r["lag_max_s"]) for r in self.table("simulation/lag.csv"))

    def cbr_sent_explained(self, flow: str, interval_s: float, lag_s: float) -> int:
        """Checks CBR FLOW's packets_sent against its sender's own first and last send and the
        start and stop events: the sender catches up when late, so it sent one packet for each
        interval from its first planned send to its last, each sent at most its worst lateness
        after it was planned (0 in the simulator); it sent nothing before its start event (the
        simulator's clock may stand LAG_S behind), and went on until its stop event. The count."""
        sent = self.raw_json(f"{flow}-0.send")
        first_s, last_s = self.run_s(sent["first_send_ns"]), self.run_s(sent["last_send_ns"])
        late_s = sent.get("lateness", {}).get("max_ns", 0) / 1e9
        done = self.events()
        n = int(sent["packets_sent"])
        most = math.floor((last_s - first_s + late_s) / interval_s + 1e-6) + 1
        least = math.floor((last_s - first_s - late_s) / interval_s + 1e-6) + 1
        print(
            f"{flow}: sent {n} from {first_s:.4f} to {last_s:.4f} s (start {done[(flow, 'start')]:.4f}"
            f", stop {done[(flow, 'stop')]:.4f}); {least}..{most} for that span, late <= {late_s:.4f}"
        )
        assert least <= n <= most, (flow, n, least, most)
        assert first_s >= done[(flow, "start")] - lag_s, (flow, first_s)
        assert last_s >= done[(flow, "stop")] - interval_s - late_s - lag_s, (flow, last_s)
        return n

    def ftp_within_the_core(self, flow: str, core_bps: float, lag_s: float) -> None:
        """FTP FLOW delivered no more than the core carries from its start event to its last byte
        (was rate <= 1.02 x the core, from first byte to last: a receiver held at its first read
        shortened that span), and bytes in every whole second from its first byte to its stop
        (was rate > 0.25 x the core; CI saw 0.49 on a busy machine): an unshaped core breaks the
        first, a flow the simulator stalls or drops the second. The simulator's clock (a sender
        or a receiver in it) stands up to LAG_S behind."""
        at, nbytes = self.events(), int(self.flows[flow]["bytes_received"])
        rows = self.table(f"traffic/{flow}.csv")
        last_s = float(rows[0]["t_s"]) + float(self.raw_json(f"{flow}-0.recv")["seconds"])
        carried_s = last_s - at[(flow, "start")] + lag_s
        print(f"{flow}: {nbytes} bytes in the {carried_s:.3f} s from its start to its last byte, "
              f"at most {core_bps * carried_s / 8:.0f}")  # fmt: skip
        assert nbytes * 8 <= core_bps * carried_s, (flow, nbytes, carried_s)
        whole = [int(r["bytes"]) for r in rows if float(r["t_s"]) + 1 <= at[(flow, "stop")]]
        assert whole and all(whole), (flow, whole)


@pytest.fixture
def simulator() -> str:
    """nestbed-sim, for tests that build namespaces around it; skips without root or it."""
    from nestbed.binaries import built_binary
    from nestbed.errors import EnvironmentProblem

    if os.geteuid() != 0:
        pytest.skip("builds network namespaces (root)")
    try:
        built_binary("nestbed-probe")
        return built_binary("nestbed-sim")
    except EnvironmentProblem:
        pytest.skip("nestbed-sim is not built (the hybrid extra): run `make setup`")


@pytest.fixture
def testbed(tmp_path):
    """The life cycle of a store of the test's own on this machine; its experiments are
    swapped out at the end however the test ended."""
    from nestbed.backend.linux import LinuxBackend
    from nestbed.lifecycle import Testbed
    from nestbed.store import State, Store

    store = Store.open(str(tmp_path / "store.db"))
    bed = Testbed(store, LinuxBackend())
    yield bed
    for record in store.list():
        if record.state not in (State.DEFINED, State.SWAPPED):
            bed.swap_out(record.name)
    store.close()


@pytest.fixture
def run_file(testbed, tmp_path):
    """Defines the ns file TEXT as NAME-PID and runs it to its `$ns halt` (``run_file(NAME,
    TEXT)``): a ``Ran``."""
    from nestbed.lifecycle.runs import run
    from nestbed.model.options import RunOptions

    def go(name: str, text: str) -> Ran:
        path = tmp_path / f"{name}{os.getpid()}.ns"
        path.write_text(text)
        loaded = load(path)
        exp = loaded.experiment
        testbed.store.create_experiment(
            exp.name, source_text=loaded.text, source_format="ns", source_file=str(path),
            ir_json=exp.to_json(),
        )  # fmt: skip
        results = tmp_path / f"results-{name}"
        summary = run(testbed, exp.name, RunOptions(results=results, report=False))
        assert summary["outcome"] == "halted", summary
        return Ran(exp, summary, results)

    return go
