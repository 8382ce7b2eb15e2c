"""Sweeps on real namespaces: whole runs per point, failed points recorded, interrupted sweeps
resumed without redoing finished points, one network reused when only links change, and
points spread by a local Dask cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbtest import EXAMPLES
from nestbed.errors import UserError
from nestbed.sweep import execute
from nestbed.sweep.spec import from_flags

pytestmark = pytest.mark.root

ARMADA = EXAMPLES / "armada.ns"


def transfer_times(rows) -> dict[str, float]:
    return {r["param.bw"]: r["program.transfer.seconds"] for r in rows}


def test_every_point_is_a_whole_run_and_a_bad_point_fails_alone(tmp_path: Path):
    sweep = from_flags(ARMADA, ["bw=10Mb,fast,50Mb"], [], timeout=60)
    rows = execute.run_sweep(sweep, tmp_path)
    by_bw = {r["param.bw"]: r for r in rows}
    assert by_bw["50Mb"]["seconds"] < 20  # it ends with its transfer, not at the timeout
    assert by_bw["fast"]["outcome"] == "failed"
    assert "delay 'fast'" not in by_bw["fast"]["reason"]  # names the bandwidth
    assert "'fast' is not a valid bandwidth" in by_bw["fast"]["reason"]
    assert by_bw["10Mb"]["outcome"] == by_bw["50Mb"]["outcome"] == "completed"
    times = transfer_times(r for r in rows if r["outcome"] == "completed")
    # 2 MiB at 10 Mb/s take 1.68 s on the wire, at 50 Mb/s 0.34 s. The program's time ends
    # when iperf3 has written its last byte, not when the byte arrives: what its socket and the
    # link's queue still hold then (up to about 0.4 s at 10 Mb/s) is not counted. Starting
    # iperf3 and its round trips of 40 ms add 0.3-0.7 s to both (a fresh clone's run: 1.07 s
    # at 50 Mb/s, 1.67 s at 10 Mb/s), so the faster link finishes first, by no set ratio.
    assert times["10Mb"] > 1.2 and times["10Mb"] > times["50Mb"]
    manifest = json.loads(Path(by_bw["10Mb"]["results"], "manifest.json").read_text())
    assert manifest["outcome"] == "completed" and by_bw["10Mb"]["seeds"]


def test_an_interrupted_sweep_resumes_without_redoing_finished_points(tmp_path: Path):
    sweep = from_flags(ARMADA, ["bw=10Mb,50Mb,100Mb"], [])

    def stop_after_first(done, total, row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute.run_sweep(sweep, tmp_path, progress=execute.Progress(stop_after_first))
    first = execute.read_rows(tmp_path)
    assert len(first) == 1
    ran = []
    rows = execute.run_sweep(
        sweep, tmp_path, progress=execute.Progress(lambda d, t, row: ran.append(row["point"]))
    )
    assert sorted(r["point"] for r in rows) == ["p0000-r0", "p0001-r0", "p0002-r0"]
    assert first[0]["point"] not in ran and len(ran) == 2
    other = from_flags(ARMADA, ["bw=1Mb"], [])
    with pytest.raises(UserError, match="holds the results of a different sweep"):
        execute.run_sweep(other, tmp_path)


def test_points_that_change_only_links_reuse_one_network(tmp_path: Path):
    sweep = from_flags(ARMADA, ["bw=10Mb,100Mb"], [], reuse_links=True)
    rows = execute.run_sweep(sweep, tmp_path)
    assert all(r["reused_network"] and r["outcome"] == "completed" for r in rows)
    times = transfer_times(rows)
    # Were the link left at 10 Mb/s, the second transfer would take as long as the first, not
    # less (the bounds of the first test: iperf3's time ends at its last byte written).
    assert times["10Mb"] > 1.2 and times["10Mb"] > times["100Mb"]
    second = json.loads(Path(rows[1]["results"], "manifest.json").read_text())
    assert second["options"]["reused_network_runs_before"] == 1


def test_a_parameter_the_experiment_does_not_use_is_refused_before_any_run(tmp_path: Path):
    sweep = from_flags(ARMADA, ["bw=10Mb,20Mb", "colour=red,blue"], [])
    with pytest.raises(
        UserError, match=r"armada\.ns: parameter 'colour' is given but the file neither"
    ):
        execute.run_sweep(sweep, tmp_path)
    assert not (tmp_path / "runs").exists()


def test_a_run_that_hangs_is_cut_at_the_timeout(tmp_path: Path):
    sweep = from_flags(ARMADA, ["bw=10Mb"], [], timeout=3)
    # 200 MB at 10 Mb/s would take 160 s.
    sweep.doc.grid["size"] = ["200M"]
    rows = execute.run_sweep(sweep, tmp_path)
    assert rows[0]["outcome"] == "timeout" and "after 3" in rows[0]["reason"]


def test_a_local_dask_cluster_runs_the_points(tmp_path: Path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:  # fmt: skip
        sweep = from_flags(ARMADA, ["bw=10Mb,50Mb"], [])
        rows = execute.run_sweep(sweep, tmp_path, cluster=cluster.scheduler_address)
    assert sorted(r["outcome"] for r in rows) == ["completed", "completed"]
    assert len(execute.read_rows(tmp_path)) == 2


def test_the_sweep_command_writes_table_summary_and_plot(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "nestbed", "sweep", str(ARMADA), "--grid", "bw=10Mb,50Mb",
         "--results", str(tmp_path / "s"), "--plot", "program.transfer.seconds:bw", "--json"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["outcomes"] == {"completed": 2}
    folder = tmp_path / "s"
    for name in ("table.csv", "table.parquet", "summary.csv", "sweep.json", "points.jsonl"):
        assert (folder / name).exists(), name
    assert Path(data["plots"][0]).stat().st_size > 1000
