"""Every example: its .ns and .yaml twins mean the same, it converts both ways without change,
it parses to the same bytes every time, and the .ns file runs unchanged in real ns-2."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nbtest import EXAMPLES, semantic
from nestbed.spec import load
from nestbed.spec import yaml as yaml_front_end
from nestbed.spec.export import to_document, to_ns
from nestbed.spec.resolve import resolve

NS_FILES = sorted(EXAMPLES.glob("*.ns"))
STUB = Path(__file__).resolve().parents[1] / "src" / "nestbed" / "spec" / "ns" / "tb_compat.tcl"


def test_there_are_examples_in_both_formats():
    names = {p.stem for p in NS_FILES}
    assert {"dumbbell", "linear", "lan", "tree"} <= names
    assert names == {p.stem for p in EXAMPLES.glob("*.yaml")}


@pytest.mark.parametrize("path", NS_FILES, ids=[p.stem for p in NS_FILES])
def test_ns_and_yaml_twins_give_the_same_ir(path):
    assert semantic(load(path).experiment) == semantic(load(path.with_suffix(".yaml")).experiment)


@pytest.mark.parametrize("path", NS_FILES, ids=[p.stem for p in NS_FILES])
def test_parsing_is_deterministic(path):
    assert load(path).experiment.to_json() == load(path).experiment.to_json()


@pytest.mark.parametrize("path", NS_FILES, ids=[p.stem for p in NS_FILES])
def test_convert_to_yaml_and_back(path):
    exp = load(path).experiment
    document, locations = yaml_front_end.read(yaml_front_end.write(to_document(exp)), "c.yaml")
    assert semantic(resolve(document, file="c.yaml", locations=locations)) == semantic(exp)


@pytest.mark.parametrize("path", NS_FILES, ids=[p.stem for p in NS_FILES])
def test_convert_to_ns_and_back(path, tmp_path):
    exp = load(path).experiment
    converted = tmp_path / f"{exp.name}.ns"
    converted.write_text(to_ns(exp))
    assert semantic(load(converted).experiment) == semantic(exp)


def _ns_binary() -> str:
    found = shutil.which("ns")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("ns-2 is not installed; `make setup` installs Debian's ns2 package")
        pytest.skip("ns-2 is not installed (make setup installs it)")
    return found


@pytest.mark.parametrize("path", NS_FILES, ids=[p.stem for p in NS_FILES])
def test_example_runs_in_real_ns2_with_the_stub(path, tmp_path):
    ns = _ns_binary()
    shutil.copy(path, tmp_path / path.name)
    shutil.copy(STUB, tmp_path / "tb_compat.tcl")
    result = subprocess.run(
        [ns, path.name], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in (result.stdout + result.stderr).lower()


def test_unlimited_bandwidth_converted_to_ns_runs_in_ns2(tmp_path):
    ns = _ns_binary()
    source = tmp_path / "z.yaml"
    source.write_text(
        "nodes: [{name: a}, {name: b}]\nlinks: [{name: l, members: [a, b], delay: 10ms}]\n"
        "agents: [{name: u, type: udp, node: a, peer: n}, {name: n, type: null, node: b}]\n"
        "applications: [{name: c, type: cbr, agent: u, rate: 1Mb}]\n"
        "events: [{at: 1, object: c, verb: start}, {at: 3, object: ns, verb: halt}]\n"
    )
    (tmp_path / "z.ns").write_text(to_ns(load(source).experiment))
    shutil.copy(STUB, tmp_path / "tb_compat.tcl")
    result = subprocess.run([ns, "z.ns"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
