"""A sweep asked to reuse one network (`--reuse-links`) when it cannot: it says why, once, and
runs every point whole (no root: the runs are stood in for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtest import EXAMPLES
from nestbed.lifecycle import runs
from nestbed.sweep import execute
from nestbed.sweep.spec import from_flags


@pytest.mark.parametrize(
    ("grid", "cluster", "said"),
    [
        (["size=1M,2M"], None, "link reuse is not possible: the points differ in more than "
                               "their links' shaping (in programs); each point is a whole run"),
        (["bw=10Mb,20Mb"], "tcp://127.0.0.1:1", "link reuse is not used on a cluster: each "
                                                 "point is a whole run there"),
    ],
)  # fmt: skip
def test_a_sweep_that_cannot_reuse_its_network_says_why(
    tmp_path: Path, monkeypatch, grid, cluster, said
):
    sweep = from_flags(EXAMPLES / "armada.ns", grid, [], reuse_links=True)
    ran: list[str] = []

    def run_alone(store_path, exp, options):  # as runs.run_alone
        ran.append(exp.name)
        return {"outcome": "completed"}

    def on_cluster(sweep, points, folder, address):  # each point here, as a worker would
        return (execute.run_point(sweep, p, folder, str(folder / "store.db")) for p in points)

    monkeypatch.setattr(runs, "run_alone", run_alone)
    monkeypatch.setattr(execute, "_run_on_cluster", on_cluster)
    notes: list[str] = []
    progress = execute.Progress(note=notes.append)
    rows = execute.run_sweep(sweep, tmp_path, cluster=cluster, progress=progress)
    assert notes == [said]
    assert len(ran) == 2 and not any(r.get("reused_network") for r in rows)
