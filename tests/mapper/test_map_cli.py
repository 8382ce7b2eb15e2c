"""`nestbed map` as a user runs it: every example, a generated 1 000-node file on a hosts.yaml,
and assign's .top/.ptop in and assign's solution out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from nbtest import EXAMPLES
from nestbed.cli import app
from nestbed.mapper import generate as g
from nestbed.mapper.emulab import write_ptop, write_top

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.ns")) + sorted(EXAMPLES.glob("*.yaml"))
HOSTS = """\
trunks:
  - {between: [sw0, core], bandwidth: 10Gb}
  - {between: [sw1, core], bandwidth: 10Gb}
hosts:
  - {name: a, count: 40, switch: sw0, cores: 4, slots: 16, nic: 10Gb}
  - {name: b, count: 40, switch: sw1, cores: 4, slots: 16, nic: 10Gb}
"""


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["map", *args])


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.name for p in EXAMPLE_FILES])
def test_every_example_maps_onto_this_machine_as_the_identity(path):
    result = run(str(path), "--json")
    assert result.exit_code == 0, result.output
    mapping = json.loads(result.output)
    assert {n["host"] for n in mapping["nodes"].values()} == {"localhost"}
    assert {p["kind"] for p in mapping["links"].values()} <= {"trivial"}


def test_an_example_maps_onto_a_hosts_file(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    result = run(str(EXAMPLES / "tree.yaml"), "--hosts", str(hosts))
    assert result.exit_code == 0, result.output
    assert "100 nodes on 7 hosts and 1 switches" in result.output


def test_a_thousand_node_file_maps_from_the_real_command(tmp_path):
    experiment = tmp_path / "big.yaml"
    lines = ["nodes:"] + [f"  - {{name: n{i}}}" for i in range(1000)] + ["links:"]
    lines += [f"  - {{members: [n{(i - 1) // 2}, n{i}], bandwidth: 100Mb}}" for i in range(1, 1000)]
    experiment.write_text("\n".join(lines) + "\n")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    result = subprocess.run(
        [sys.executable, "-m", "nestbed", "map", str(experiment), "--hosts", str(hosts), "--json"],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    mapping = json.loads(result.stdout)
    assert len(mapping["nodes"]) == 1000
    assert mapping["cost"]["hosts_used"] == 63  # 1000 nodes, 16 slots a host
    assert mapping["cost"]["switches_used"] == 2


def test_top_and_ptop_give_assigns_solution(tmp_path):
    top, ptop = tmp_path / "x.top", tmp_path / "y.ptop"
    top.write_text(write_top(g.lan(6)))
    ptop.write_text(write_ptop(g.testbed(2, 4)))
    result = run("--top", str(top), "--ptop", str(ptop))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "Nodes:" and lines[-1] == "End solution"
    nodes = lines[1 : lines.index("End Nodes")]
    assert len(nodes) == 7 and nodes[-1].startswith("lan0 ")
    edges = lines[lines.index("Edges:") + 1 : lines.index("End Edges")]
    assert len(edges) == 6 and all(e.split()[1] in ("direct", "interswitch") for e in edges)


def test_write_top_and_ptop_from_an_experiment_and_a_hosts_file(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    top, ptop = tmp_path / "d.top", tmp_path / "d.ptop"
    result = run(
        str(EXAMPLES / "dumbbell.yaml"),
        "--hosts",
        str(hosts),
        "--to-top",
        str(top),
        "--to-ptop",
        str(ptop),
    )
    assert result.exit_code == 0, result.output
    again = run("--top", str(top), "--ptop", str(ptop))
    assert again.exit_code == 0 and "bottleneck" in again.output


def test_an_infeasible_map_is_one_line_and_exit_2(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts: [{name: a, slots: 2}]\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nestbed",
            "map",
            str(EXAMPLES / "dumbbell.yaml"),
            "--hosts",
            str(hosts),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: the 6 nodes of type pc need 6 pc slots but the testbed has only 2"
    )


def test_file_and_top_together_are_refused():
    result = run(str(EXAMPLES / "lan.yaml"), "--top", "x.top")
    assert result.exit_code != 0
