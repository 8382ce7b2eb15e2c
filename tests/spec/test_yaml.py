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
