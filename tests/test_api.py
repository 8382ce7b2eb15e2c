"""The Python API builds the same IR as the files, and reports mistakes at the caller's line."""

import pytest

from nestbed import Experiment
from nestbed.errors import SpecError


def test_python_api_builds_a_link():
    exp = Experiment("x")
    a, b = exp.node("a"), exp.node("b")
    link = exp.link(a, b, bandwidth="10Mb", delay="20ms")
    exp.at(5, link, "down")
    ir = exp.build()
    assert ir.links[0].name == "link0"
    assert ir.links[0].ports[0].egress.bandwidth_bps == 10_000_000
    assert ir.events[0].object == "link0"
    assert ir.source.format == "python"


def test_python_api_errors_point_at_the_calling_line():
    exp = Experiment("x")
    a = exp.node("a")
    exp.link(a, "ghost", delay="-3ms")
    line = exp.link.__code__  # noqa: F841 - keep the call above on a known line
    with pytest.raises(SpecError) as info:
        exp.build()
    found = [str(p) for p in info.value.problems]
    assert found == [
        "test_api.py:24: link link0: member 'ghost' does not exist; declare it or fix the name",
        "test_api.py:24: link link0: delay '-3ms' is negative; write a non-negative delay in s, ms, us or ns (for example 20ms)",
    ]


def test_python_api_and_yaml_agree(tmp_path):
    from nestbed.spec import load

    (tmp_path / "x.yaml").write_text(
        "nodes: [{name: a}, {name: b}]\nlinks: [{members: [a, b], bandwidth: 10Mb, delay: 20ms}]\n"
    )
    exp = Experiment("x")
    exp.link(exp.node("a"), exp.node("b"), bandwidth="10Mb", delay="20ms")
    from nbtest import semantic

    assert semantic(exp.build()) == semantic(load(tmp_path / "x.yaml").experiment)


def test_python_api_returns_the_names_the_ir_uses():
    exp = Experiment("x")
    a, b, c = exp.node("a"), exp.node("b"), exp.node("c")
    exp.link(a, b, name="core")
    first = exp.link(b, c)
    exp.at(1, first, "down")
    ir = exp.build()
    assert first.name == "link0" and ir.events[0].object == "link0"
    assert [link.name for link in ir.links] == ["core", "link0"]
