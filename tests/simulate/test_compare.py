"""`compare`: run folders side by side, from real simulated runs and from hand-made folders in
the layout an emulated run writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_helpers import Simulate

from nestbed.errors import UserError
from nestbed.simulate import compare, format_table

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FLOWS = "flow,kind,source,destination,started_s,ended_s,packets_sent,bytes_sent,packets_received,bytes_received,loss,throughput_bps,delay_mean_ms,delay_p50_ms,delay_p99_ms,retransmits,outcome"
SERIES = "t_s,packets,bytes,throughput_bps,delay_mean_ms,retransmits"


def run_folder(folder: Path, flows: list[str], backend: str | None = None) -> Path:
    """A run folder as an emulated (or simulated) run leaves it: manifest and traffic tables."""
    (folder / "traffic").mkdir(parents=True)
    options = {"backend": backend} if backend else {"capture": False}
    manifest = {"experiment": "x", "outcome": "completed", "options": options}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "traffic" / "flows.csv").write_text("\n".join([FLOWS, *flows]) + "\n")
    for row in flows:
        name = row.split(",")[0]
        rate = float(row.split(",")[11])
        series = [f"{t},500,{rate / 8:.0f},{rate:.0f},20,0" for t in range(1, 4)]
        (folder / "traffic" / f"{name}.csv").write_text("\n".join([SERIES, *series]) + "\n")
    return folder


def flow(name: str, throughput: float, delay: float | str, loss: float) -> str:
    return f"{name},cbr,h1,h3,1,4,100,50000,99,49500,{loss},{throughput},{delay},,,,ok"


def test_differences_are_flagged_by_the_tolerance(tmp_path: Path) -> None:
    a = run_folder(tmp_path / "sim", [flow("c0", 2e6, 22.5, 0.0), flow("c1", 1e6, 10, 0.0)],
                   backend="ns-2")  # fmt: skip
    b = run_folder(tmp_path / "emu", [flow("c0", 2.03e6, 22.6, 0.001), flow("c1", 1e6, 12, 0.05)])
    result = compare([a, b], tolerance=0.02)
    assert [r["backend"] for r in result["runs"]] == ["ns-2", "emulation"]
    c0 = result["flows"][0]["metrics"]
    assert c0["throughput_bps"]["values"] == {"sim": 2e6, "emu": 2.03e6}
    d = c0["throughput_bps"]["differences"]["emu"]
    assert d["absolute"] == pytest.approx(3e4) and d["relative"] == pytest.approx(0.015)
    assert not d["beyond"]  # 1.5 % < 2 %
    assert not c0["delay_mean_ms"]["differences"]["emu"]["beyond"]  # 0.44 %
    assert not c0["loss"]["differences"]["emu"]["beyond"]  # 0.1 percentage points
    assert result["differences"] == [
        "c1: mean one-way delay of emu differs from sim by +20.0 %",
        "c1: loss of emu differs from sim by +5.00 percentage points",
    ]
    assert not result["agree"]
    stricter = compare([a, b], tolerance=0.01)
    assert "c0: throughput of emu differs from sim by +1.5 %" in stricter["differences"]
    json.dumps(result)  # JSON-able as it is


def test_the_table_is_plain_text_ready_to_print(tmp_path: Path) -> None:
    a = run_folder(tmp_path / "a", [flow("c0", 2e6, 22.5, 0.0)])
    b = run_folder(tmp_path / "b", [flow("c0", 1e6, 22.5, 0.0)])
    result = compare([a, b])
    t = result["table"]
    assert t["columns"] == ["flow", "metric", "a", "b", "Δ b", "Δ% b", "beyond tolerance"]
    assert t["rows"][0] == ["c0", "throughput", "2 Mb/s", "1 Mb/s", "-1 Mb/s", "-50.0 %", "b"]
    text = format_table(result)
    assert "c0    throughput" in text and "! c0: throughput of b differs from a by -50.0 %" in text


def test_a_flow_missing_from_a_run_is_a_difference(tmp_path: Path) -> None:
    a = run_folder(tmp_path / "a", [flow("c0", 2e6, 22.5, 0.0), flow("c1", 1e6, 1, 0.0)])
    b = run_folder(tmp_path / "b", [flow("c0", 2e6, 22.5, 0.0)])
    result = compare([a, b])
    assert result["missing"] == [{"flow": "c1", "runs": ["b"]}]
    assert result["differences"] == ["c1: missing from b"]


def test_output_has_json_markdown_and_overlaid_plots(tmp_path: Path) -> None:
    a = run_folder(tmp_path / "a", [flow("c0", 2e6, 22.5, 0.0)])
    b = run_folder(tmp_path / "b", [flow("c0", 2e6, 22.5, 0.0)])
    out = tmp_path / "cmp"
    result = compare([a, b], output=out)
    assert result["agree"]
    assert json.loads((out / "compare.json").read_text())["flows"] == result["flows"]
    assert "| c0 | throughput | 2 Mb/s | 2 Mb/s |" in (out / "compare.md").read_text()
    for name in ("throughput.png", "delay.png"):
        assert (out / "plots" / name).read_bytes().startswith(PNG_SIGNATURE)


def test_what_is_not_a_run_folder_is_refused(tmp_path: Path) -> None:
    a = run_folder(tmp_path / "a", [flow("c0", 2e6, 22.5, 0.0)])
    with pytest.raises(UserError, match=r"has no manifest\.json"):
        compare([a, tmp_path])
    with pytest.raises(UserError, match="at least two"):
        compare([a])


def test_two_simulations_of_a_file_agree_and_a_changed_rate_does_not(sim: Simulate) -> None:
    body = """
set opt(rate) 1Mb
set a [$ns node]
set b [$ns node]
$ns duplex-link $a $b 10Mb 5ms DropTail
set u [new Agent/UDP]
$ns attach-agent $a $u
set n [new Agent/Null]
$ns attach-agent $b $n
$ns connect $u $n
set c0 [new Application/Traffic/CBR]
$c0 attach-agent $u
$c0 set packetSize_ 1000
$c0 set rate_ $opt(rate)
$ns at 0 "$c0 start"
$ns at 2 "$c0 stop"
$ns at 2.5 "$ns halt"
"""
    _, one = sim(body)
    _, two = sim(body)
    _, faster = sim(body, parameters={"rate": "1.5Mb"})
    same = compare([one, two])
    assert same["agree"]
    assert same["flows"][0]["metrics"]["throughput_bps"]["differences"]["run1"]["absolute"] == 0
    changed = compare([one, faster])
    d = changed["flows"][0]["metrics"]["throughput_bps"]["differences"]["run2"]
    assert d["relative"] == pytest.approx(0.5, abs=0.005) and d["beyond"]
    assert changed["flows"][0]["metrics"]["delay_mean_ms"]["differences"]["run2"]["absolute"] == 0


def test_tcp_tables_are_compared_by_how_each_drop_was_recovered(tmp_path: Path) -> None:
    a = run_folder(tmp_path / "sim", [flow("f", 1e6, "", 0.0)], backend="ns-2")
    b = run_folder(tmp_path / "emu", [flow("f", 1e6, "", 0.0)])
    (a / "tcp").mkdir()
    (b / "tcp").mkdir()
    # ns-2: segment 3 dropped, three duplicate ACKs of 2, resent at once.
    (a / "tcp" / "f.csv").write_text(
        "t_s,event,seq\n1.0,send,1\n1.0,send,2\n1.0,send,3\n1.0,drop,3\n1.0,send,4\n1.0,send,5\n"
        "1.0,send,6\n1.1,ack,1\n1.1,ack,2\n1.2,ack,2\n1.2,ack,2\n1.2,ack,2\n1.2,send,3\n1.3,ack,6\n"
    )
    # Linux: byte 1448 dropped, no duplicate ACKs (the tail of a flight), resent 0.4 s later.
    (b / "tcp" / "f.csv").write_text(
        "t_s,event,seq,bytes,session\n1.0,send,0,1448,0\n1.0,send,1448,1448,0\n"
        "1.0,drop,1448,1448,0\n1.1,ack,1448,0,0\n1.4,send,1448,1448,0\n1.5,ack,2896,0,0\n"
    )
    result = compare([a, b], output=tmp_path / "cmp")
    [tcp] = result["tcp"]
    assert [r["recovery"] for r in tcp["runs"]["sim"]["recoveries"]] == ["fast retransmit"]
    assert tcp["runs"]["sim"]["recoveries"][0]["duplicate_acks"] == 3
    [timer] = tcp["runs"]["emu"]["recoveries"]
    assert (timer["recovery"], timer["seq"], timer["duplicate_acks"]) == ("timer", 1448, 0)
    assert timer["resent_s"] - timer["dropped_s"] == pytest.approx(0.4)
    assert not tcp["all_fast_retransmit"]
    assert "f in emu: 1 segment dropped in the network: 1 timer" in format_table(result)
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "  - byte 1448 dropped at 1.000 s, 0 duplicate ACKs, timer" in md
    assert (tmp_path / "cmp" / "plots" / "tcp-f.png").read_bytes().startswith(PNG_SIGNATURE)


def test_runs_without_flows_say_there_is_nothing_to_compare(tmp_path: Path) -> None:
    a, b = run_folder(tmp_path / "a", []), run_folder(tmp_path / "b", [])
    text = format_table(compare([a, b]))
    assert text == "no traffic flows in these runs to compare (programs are not compared)"
