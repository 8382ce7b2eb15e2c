"""A CBR flow's table from its tools' files: one-way delays between nodes on two hosts are
stamped by two clocks, and the flow corrects them by the hosts' monotonic offsets measured at
swap-in (on one host both offsets are 0)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from nestbed.control.traffic import CbrFlow, Session
from nestbed.model import Agent, Application
from nestbed.results.folder import RunFolder

DELAY_NS = 20_000_000  # the link's one-way delay, as the datagrams really took it


class _Controller:
    def __init__(self, tmp: Path, offsets_ns: dict[str, float]):
        self.folder = RunFolder(tmp / "run").make()
        self.offsets_ns = offsets_ns

    def clock_offset_ns(self, node: str) -> float:
        return self.offsets_ns.get(node, 0.0)


def _flow_over_two_clocks(tmp: Path, offsets_ns: dict[str, float], t0_ns: int) -> dict:
    """A flow a -> b whose probes logged 5 datagrams a second apart, each taking DELAY_NS:
    the sender stamps a's clock, the receiver reads b's, so the logged delay carries b's
    offset less a's."""
    ctl = _Controller(tmp, offsets_ns)
    app = Application(name="cbr0", kind="cbr", agent="udp0")
    agent = Agent(name="udp0", kind="udp", node="a", peer="null0")
    flow = CbrFlow(app, agent, "a", "b", "10.1.1.3", 0, ctl)  # type: ignore[arg-type]
    skew = int(offsets_ns["b"] - offsets_ns["a"])
    lines = ["seq,burst,send_ns,recv_ns,size,delay_ns"]
    for i in range(5):
        send_on_a = t0_ns + int(offsets_ns["a"]) + i * 1_000_000_000
        recv_on_b = send_on_a + DELAY_NS + skew
        lines.append(f"{i},0,{send_on_a},{recv_on_b},100,{recv_on_b - send_on_a}")
    files = {part: tmp / f"cbr0.{part}" for part in ("send", "recv", "log")}
    files["send"].write_text(json.dumps({"packets_sent": 5, "bytes_sent": 500}))
    files["recv"].write_text(json.dumps({"unique": 5, "bytes": 500}))
    files["log"].write_text("\n".join(lines) + "\n")
    sender = SimpleNamespace()  # the session's sender ran; only its files are read
    flow.sessions.append(Session(port=1, receiver=None, sender=sender, files=files))  # type: ignore[arg-type]
    row, series = flow.results(t0_ns)
    return {"row": row, "series": series}


@pytest.mark.parametrize("offsets_ns", [{"a": 0.0, "b": 0.0},
                                        {"a": 2.5e9, "b": -86_400e9}])  # fmt: skip
def test_one_way_delays_across_hosts_are_corrected_by_the_hosts_clock_offsets(tmp_path, offsets_ns):
    found = _flow_over_two_clocks(tmp_path, offsets_ns, t0_ns=1_000_000_000_000)
    row = found["row"]
    assert row["delay_p50_ms"] == pytest.approx(DELAY_NS / 1e6)
    assert row["delay_mean_ms"] == pytest.approx(DELAY_NS / 1e6)
    # The arrivals, on the controller's clock since t0, fall in seconds 0 to 4.
    assert [s["t_s"] for s in found["series"]] == [0, 1, 2, 3, 4]
    assert all(s["delay_mean_ms"] == pytest.approx(DELAY_NS / 1e6) for s in found["series"])
