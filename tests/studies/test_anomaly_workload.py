"""The connection-pair workload over loopback (no root): sizes, socket buffers, pairs and
rounds, a transfer cut by its time limit or short-changed by the server recorded as failed;
and how the study turns analyzed transfers into a verdict per node pair."""

from __future__ import annotations

import csv
import random
import socket
import threading
from pathlib import Path

import pytest

from nestbed.studies.anomaly import workload
from nestbed.studies.anomaly.study import Pair, judge_pair
from nestbed.studies.anomaly.workload import Schedule


def test_sizes_are_binary_as_in_table_2():
    assert workload.parse_sizes("16KB/8MB,64K/32MiB") == ((16384, 8 * 2**20), (65536, 32 * 2**20))
    assert workload.TABLE2[0] == (16 * 1024, 8 * 1024 * 1024) and len(workload.TABLE2) == 5
    for bad in ("16KB", "16KB/", "x/8MB", "16XB/8MB", "-1KB/8MB"):
        with pytest.raises(ValueError, match=r"write e\.g\."):
            workload.parse_sizes(bad)


def _ports() -> tuple[list[socket.socket], int]:
    """Listeners on PORT (probe buffer) and PORT+1 (data buffer), PORT free for both."""
    for _ in range(50):
        port = random.randrange(20000, 60000)
        try:
            first = workload.listener(port, workload.PROBE_BUFFER, "127.0.0.1")
        except OSError:
            continue
        try:
            return [first, workload.listener(port + 1, workload.DATA_BUFFER, "127.0.0.1")], port
        except OSError:
            first.close()
    raise RuntimeError("no two free ports in a row")


@pytest.fixture
def server():
    socks, port = _ports()
    stop = threading.Event()
    thread = threading.Thread(target=workload.serve, args=(socks, stop), daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join(5)


def test_listeners_carry_the_probe_and_data_buffers():
    socks, _ = _ports()
    try:
        # Linux doubles what is asked (bookkeeping overhead); the request itself is the paper's.
        got = [s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) for s in socks]
        assert got == [2 * workload.PROBE_BUFFER, 2 * workload.DATA_BUFFER]
    finally:
        for s in socks:
            s.close()


def test_pairs_at_once_each_a_probe_then_a_data_transfer_every_round(server):
    rows: list[dict] = []
    schedule = Schedule(sizes=((4096, 300_000), (8192, 100_000)), pairs=3, rounds=2,
                        every_s=0, limit_s=30)  # fmt: skip
    failed = workload.send("127.0.0.1", server, schedule, rows.append)
    assert failed == 0
    assert len(rows) == 2 * 2 * 3 * 2  # rounds × combinations × pairs × (probe, data)
    assert all(r["outcome"] == "ok" and r["reason"] == "" for r in rows)
    assert all(r["received_bytes"] == r["sent_bytes"] == r["size_bytes"] for r in rows)
    keys = {(r["round"], r["combo"], r["pair"], r["kind"]) for r in rows}
    assert len(keys) == len(rows)
    sizes = {(r["combo"], r["kind"]): r["size_bytes"] for r in rows}
    assert sizes == {(1, "probe"): 4096, (1, "data"): 300_000, (2, "probe"): 8192,
                     (2, "data"): 100_000}  # fmt: skip
    assert {r["port"] for r in rows if r["kind"] == "probe"} == {server}
    assert {r["port"] for r in rows if r["kind"] == "data"} == {server + 1}
    for r in rows:  # each pair's data transfer begins after its probe ended
        probe = next(p for p in rows if p["kind"] == "probe" and
                     (p["round"], p["combo"], p["pair"]) == (r["round"], r["combo"], r["pair"]))  # fmt: skip
        if r["kind"] == "data":
            assert r["start_unix_s"] >= probe["end_unix_s"]
            assert r["local_port"] != probe["local_port"]
    # Every combination of a round ends before the next begins.
    first, second = ([r for r in rows if r["round"] == 1 and r["combo"] == c] for c in (1, 2))
    assert max(r["end_unix_s"] for r in first) <= min(r["start_unix_s"] for r in second)


def test_a_transfer_past_its_time_limit_is_failed():
    # A server that completes handshakes but never reads: the sender fills both buffers and
    # can send no more.
    sink = workload.listener(0, 4096, "127.0.0.1")
    try:
        port = sink.getsockname()[1]
        row = workload.transfer("127.0.0.1", port, 64 * 2**20, 4096, limit_s=0.5)
    finally:
        sink.close()
    assert row["outcome"] == "failed" and row["reason"] == "time limit"
    assert 0 < row["sent_bytes"] < row["size_bytes"]
    assert row["received_bytes"] is None and row["throughput_bytes_per_s"] is None


def test_a_short_count_from_the_server_is_failed():
    sock = workload.listener(0, 65536, "127.0.0.1")

    def short_changing() -> None:
        conn, _ = sock.accept()
        with conn:
            got = 0
            while n := len(conn.recv(65536)):
                got += n
            conn.sendall(workload._COUNT.pack(got - 1))

    thread = threading.Thread(target=short_changing, daemon=True)
    thread.start()
    row = workload.transfer("127.0.0.1", sock.getsockname()[1], 100_000, 65536, limit_s=10)
    thread.join(5)
    sock.close()
    assert row["outcome"] == "failed"
    assert row["reason"] == "the server received 99999 bytes"


def test_no_server_is_failed_not_raised():
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    row = workload.transfer("127.0.0.1", port, 1000, 4096, limit_s=0.3)
    assert row["outcome"] == "failed" and row["reason"].startswith("connect:")


def test_the_command_writes_transfers_csv_in_the_program_folder(server, tmp_path, monkeypatch):
    monkeypatch.setenv("NESTBED_PROGRAM_DIR", str(tmp_path))
    argv = ["send", "--to", "127.0.0.1", "--port", str(server), "--sizes", "4KB/64KB",
            "--pairs", "2", "--limit", "30"]  # fmt: skip
    assert workload.main(argv) == 0
    with (tmp_path / "transfers.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == workload.RECORD_COLUMNS
    assert sorted((r["pair"], r["kind"]) for r in rows) == [
        ("1", "data"), ("1", "probe"), ("2", "data"), ("2", "probe")]  # fmt: skip
    assert {r["outcome"] for r in rows} == {"ok"}
    assert {r["size_bytes"] for r in rows} == {"4096", "65536"}


def test_bad_schedules_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        workload.main(["send", "--to", "x", "--pairs", "0"])
    assert exc.value.code == 2
    assert "--pairs" in capsys.readouterr().err


def _transfer(sport: int, verdict: str, src: str = "10.1.1.2", size: int = 4_000_000) -> dict:
    return {"src": src, "sport": sport, "verdict": verdict, "bytes": size,
            "evidence": {"ratio": 0.2, "cpu": {"available_mean": 0.1}}}  # fmt: skip


def test_a_pair_is_judged_by_its_data_transfers_only():
    pair = Pair("s-1", "r-1", "host anomaly", "CPU-starved sender")
    records = [{"kind": "data", "local_port": "40001", "outcome": "ok"},
               {"kind": "data", "local_port": "40002", "outcome": "ok"},
               {"kind": "data", "local_port": "40003", "outcome": "failed"},
               {"kind": "probe", "local_port": "40010", "outcome": "ok"}]  # fmt: skip
    transfers = [
        _transfer(40001, "host anomaly"), _transfer(40002, "host anomaly"),
        _transfer(40003, "normal"),
        _transfer(40010, "normal", size=65536),  # the probe: not counted
        _transfer(40004, "normal"),  # not one of the workload's transfers
        _transfer(40001, "normal", src="10.1.2.2"),  # another node's port
    ]  # fmt: skip
    p = judge_pair(pair, transfers, records, {"s-1": ["10.1.1.2"]})
    assert p["verdict"] == "host anomaly" and p["correct"]
    assert (p["data_transfers"], p["agreeing"], p["failed_transfers"]) == (3, 2, 1)
    assert p["verdict_counts"] == {"host anomaly": 2, "normal": 1}
    assert p["example"]["sport"] in (40001, 40002)
    wrong = judge_pair(Pair("s-1", "r-1", "normal", "clean"), transfers, records,
                       {"s-1": ["10.1.1.2"]})  # fmt: skip
    assert not wrong["correct"] and wrong["agreeing"] == 1
    none = judge_pair(pair, transfers, [], {"s-1": ["10.1.1.2"]})
    assert none["verdict"] is None and not none["correct"] and none["example"] is None


def test_the_shipped_file_has_the_pairs_the_study_judges():
    from nestbed.spec import load
    from nestbed.studies.anomaly.study import EXAMPLE, PAIRS, Settings

    exp = load(EXAMPLE, parameters=Settings().parameters()).experiment
    nodes = {n.name: n for n in exp.nodes}
    assert {p.sender for p in PAIRS} | {p.receiver for p in PAIRS} <= set(nodes)
    assert nodes["s-1"].cpu_cores == Settings().quota
    assert [n for n in nodes.values() if n.cpu_cores] == [nodes["s-1"]]
    lossy = [link for link in exp.all_links if any(p.egress.loss for p in link.ports)]
    assert [{p.node for p in link.ports} for link in lossy] == [{"s-3", "r-3"}]
    assert Path(EXAMPLE).with_suffix(".yaml").is_file()
