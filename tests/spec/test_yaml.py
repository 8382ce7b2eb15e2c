"""The YAML front end: syntax errors with lines, YAML quirks, and the YAML writer."""

import pytest

from nestbed.errors import SpecError
from nestbed.spec import yaml as yaml_front_end


def problems(text):
    with pytest.raises(SpecError) as info:
        yaml_front_end.read(text, "t.yaml")
    return [str(p) for p in info.value.problems]


def test_syntax_error_has_its_line():
    found = problems("nodes:\n  - name: a\n  - {name: b\n")
    assert len(found) == 1 and found[0].startswith("t.yaml:4: this is not valid YAML:")


def test_empty_file_and_wrong_top_level():
    assert problems("") == ["t.yaml:1: the file is empty; describe nodes and links"]
    assert problems("- a\n") == [
        "t.yaml:1: the file must be a mapping with keys such as nodes and links"
    ]


def test_null_is_the_ns2_agent_and_on_is_a_word():
    document, _ = yaml_front_end.read(
        "nodes: [{name: a, os: on}]\nagents: [{name: n, type: null, node: a}]\n", "t.yaml"
    )
    assert document.agents[0].type == "null"
    assert document.nodes[0].os == "on"


def test_locations_point_at_keys():
    _, locations = yaml_front_end.read("nodes:\n  - name: a\n    os: X\n", "t.yaml")
    assert locations["nodes.0.os"] == ("t.yaml", 3)
    assert locations["nodes.0"] == ("t.yaml", 2)


def test_write_then_read_gives_the_same_document():
    document, _ = yaml_front_end.read(
        "nodes: [{name: a}, {name: b}]\nlinks: [{name: l, members: [a, b], bandwidth: 10Mb, delay: 20ms}]\n",
        "t.yaml",
    )
    again, _ = yaml_front_end.read(yaml_front_end.write(document), "t.yaml")
    assert again == document


def test_a_self_referencing_alias_is_an_error():
    assert problems("nodes: &x [*x]\n") == ["t.yaml: an alias refers to itself; remove the loop"]


TEMPLATE = """parameters: {bw: 10Mb, delay: 20ms, n: 3, cores: 0.5}
nodes: [{name: a, cpu: '${cores}'}, {name: b}]
links:
- {name: l, members: [a, b], bandwidth: '${bw}', delay: '${delay}'}
programs:
- {name: p, node: a, command: 'ping -c ${n} b; echo ${HOME}'}
"""


def test_declared_parameters_are_substituted(tmp_path):
    from nestbed.spec import load

    path = tmp_path / "t.yaml"
    path.write_text(TEMPLATE)
    exp = load(path).experiment
    egress = exp.links[0].ports[0].egress
    assert (egress.bandwidth_bps, egress.delay_s) == (10_000_000, 0.02)
    assert exp.nodes[0].cpu_cores == 0.5
    # only declared names are parameters; ${HOME} is the shell's
    assert exp.programs[0].command == "ping -c 3 b; echo ${HOME}"
    exp = load(path, parameters={"bw": "1Mb", "n": "5"}).experiment
    assert exp.links[0].ports[0].egress.bandwidth_bps == 1_000_000
    assert exp.programs[0].command == "ping -c 5 b; echo ${HOME}"
    assert exp.parameters == {"bw": "1Mb", "delay": "20ms", "n": "5", "cores": "0.5"}


def test_a_substituted_value_that_is_wrong_is_reported_at_its_line(tmp_path):
    from nestbed.spec import load

    path = tmp_path / "t.yaml"
    path.write_text(TEMPLATE)
    with pytest.raises(SpecError) as info:
        load(path, parameters={"bw": "fast"})
    assert [(p.line, "fast" in p.message) for p in info.value.problems] == [(4, True)]
