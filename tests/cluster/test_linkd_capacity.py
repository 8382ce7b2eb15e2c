"""What a host's link emulator carries, measured (`nestbed linkd-capacity`) and reported by an
agent started with `--linkd-pps measure`, for the mapper to keep shaped links within."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from simulated import SRC, started

pytestmark = pytest.mark.root


def test_linkd_capacity_measures_what_linkd_carries_and_says_what_bound_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC), "NESTBED_RUN_DIR": str(tmp_path / "run")}
    env.pop("NESTBED_CLUSTER", None)
    done = subprocess.run([sys.executable, "-m", "nestbed", "linkd-capacity", "--json"],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    print(f"linkd-capacity: {found}")
    assert found["frame_bytes"] == 64 and found["pps"] > 0
    assert found["limited_by"] in ("linkd", "generator")
    # What arrived never exceeds what was offered (1 % for the two ends' spans).
    assert found["pps"] <= 1.01 * found["sent_pps"]


def test_an_agent_told_to_measure_reports_its_measured_packet_rate():
    from nestbed.backend.cluster.backend import ClusterBackend

    with started(1, slots=2, options=("--linkd-pps", "measure")) as (_, agents):
        with ClusterBackend(agents.address) as cluster:
            (facts,) = cluster.facts()
        said = "\n".join(p.read_text() for p in agents.folder.glob("agent-*.log"))
    assert facts.linkd_pps is not None and facts.linkd_pps > 0
    assert f"host h1's link emulator carries {facts.linkd_pps} packets/s" in said
